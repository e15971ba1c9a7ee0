//! What a factory offers the [deployment suite](crate::suites::deployment):
//! misdeployments it can stage and connect to.

use async_trait::async_trait;
use tenure_lease_core::ErrorKind;

/// A deployment the store must refuse, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misdeployment {
    /// What is wrong, as the factory names it (`"maxmemory-policy
    /// allkeys-lru"`); also how the factory recognises it in
    /// [`DeploymentSupport::connect_misdeployed`].
    pub name: String,
    /// The kind of error the refusal must have.
    pub refusal: ErrorKind,
    /// Words the refusal's message must contain (the setting, its value,
    /// the fix), so an operator reading it knows what to change.
    pub mentions: Vec<String>,
}

impl Misdeployment {
    /// A misdeployment `name`, refused with `refusal` naming every one of
    /// `mentions`.
    pub fn new(
        name: impl Into<String>,
        refusal: ErrorKind,
        mentions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Misdeployment {
            name: name.into(),
            refusal,
            mentions: mentions.into_iter().map(Into::into).collect(),
        }
    }
}

/// What a factory offers the deployment suite; see the [module docs](crate::suites::deployment).
#[async_trait]
pub trait DeploymentSupport: Send + Sync {
    /// Why the misdeployed servers cannot be staged here, or `None` when
    /// they can. The scenario is then skipped, or fails under
    /// `TENURE_REQUIRE_SERVICES=1`.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// Every misdeployment the factory can stage.
    fn misdeployments(&self) -> Vec<Misdeployment>;

    /// Stages `which` (starts a private server so configured, writes a
    /// schema so damaged...), connects a store to it the way an
    /// application would, removes what it staged and answers how connecting
    /// went.
    ///
    /// # Errors
    ///
    /// The refusal the kit checks; an `Ok` means the store accepted the
    /// misdeployment, which fails the scenario. Failing to stage it fails
    /// the scenario too (by a panic, or an error that is not the refusal).
    async fn connect_misdeployed(&self, which: &Misdeployment) -> tenure_lease_core::Result<()>;
}
