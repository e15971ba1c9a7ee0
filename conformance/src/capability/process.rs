//! What a factory offers the [process suite](crate::suites::process): a
//! store other processes of the test binary can open by an address.

use async_trait::async_trait;

/// A store other processes can open: what [`ProcessSupport::create_shared`]
/// answers.
pub struct SharedStore<S> {
    /// The store, in a namespace (schema, key prefix, file...) of its own;
    /// [`Factory::teardown`](crate::Factory::teardown) removes it afterwards.
    pub store: S,
    /// What [`ProcessSupport::open_shared`] needs, in another process of
    /// the same test binary, to open a store on the same records (a schema
    /// name, a namespace, a file path).
    pub address: String,
}

/// What a factory offers the process suite; see the [module docs](crate::suites::process).
#[async_trait]
pub trait ProcessSupport<S>: Send + Sync {
    /// A new store, sharing nothing with any other test, that other
    /// processes can open. Its clock must be the real one (the scenarios
    /// wait for leases to expire) and it must wait patiently for locks:
    /// several processes write at once.
    ///
    /// # Errors
    ///
    /// When the store cannot be created; the scenario then fails.
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<S>>;

    /// In a child process: a store on the records `address` names.
    ///
    /// # Errors
    ///
    /// When the store cannot be opened; the child, and so the scenario,
    /// then fails.
    async fn open_shared(&self, address: &str) -> tenure_lease_core::Result<S>;
}
