//! The [`Ctx`] methods through which a case uses the factory's optional
//! capabilities: damage its store behind its back, reopen it, open it on an
//! offset clock. Each marks the case skipped when the factory offers none.

use std::sync::Arc;

use chrono::TimeDelta;
use tenure_lease_core::LeaseStore;

use super::{Ctx, Failure};
use crate::damage::{Damage, DamageOutcome, Damager, Target};
use crate::offset_clock::{ClockOffsetter, OffsetStore};
use crate::reopen::Reopener;

impl<S: LeaseStore> Ctx<S> {
    /// The context, able to damage its store with `damager`.
    pub fn with_damager(mut self, damager: Option<Damager<S>>) -> Self {
        self.damager = damager;
        self
    }

    /// Whether the factory can damage this store at all.
    pub fn can_damage(&self) -> bool {
        self.damager.is_some()
    }

    /// Applies `damage` to `target` in the store, behind its back.
    ///
    /// # Errors
    ///
    /// A failure when the factory could not apply a damage it should have.
    pub async fn damage(&self, target: Target, damage: Damage) -> Result<DamageOutcome, Failure> {
        let Some(damager) = &self.damager else {
            self.skip("the factory cannot damage what its stores keep")?;
            return Ok(DamageOutcome::CannotHold);
        };
        damager(Arc::clone(&self.store), target.clone(), damage)
            .await
            .map_err(|error| {
                Failure(format!(
                    "the factory could not damage {target:?} with {damage}: {error}"
                ))
            })
    }
}

impl<S> Ctx<S> {
    /// The context, able to open its store on an offset clock with
    /// `offsetter`.
    pub fn with_clock_offsetter(mut self, offsetter: Option<ClockOffsetter<S>>) -> Self {
        self.clock_offsetter = offsetter;
        self
    }

    /// A store whose clock runs `offset` from the process clock, or `None`
    /// (the case marked skipped) when the factory cannot open one.
    ///
    /// # Errors
    ///
    /// A failure when the factory could not open a store it should have.
    pub async fn offset_store(&self, offset: TimeDelta) -> Result<Option<OffsetStore<S>>, Failure> {
        let Some(offsetter) = &self.clock_offsetter else {
            self.skip(
                "the factory cannot run a store on a clock offset from this process's \
                 (`Factory::clock_offset` answers `None`)",
            )?;
            return Ok(None);
        };
        offsetter(Arc::clone(&self.store), offset)
            .await
            .map(Some)
            .map_err(|error| {
                Failure(format!(
                    "the factory could not open a store on a clock offset by {offset}: {error}"
                ))
            })
    }
}

impl<S> Ctx<S> {
    /// The context, able to reopen its store with `reopener`.
    pub fn with_reopener(mut self, reopener: Option<Reopener<S>>) -> Self {
        self.reopener = reopener;
        self
    }

    /// A fresh store on the case's backing data, or `None` (the case marked
    /// skipped) when the factory cannot open one.
    ///
    /// # Errors
    ///
    /// A failure when the factory could not open a store it should have.
    pub async fn reopen(&self) -> Result<Option<S>, Failure> {
        let Some(reopener) = &self.reopener else {
            self.skip("the factory cannot open a second store on a case's data")?;
            return Ok(None);
        };
        reopener(Arc::clone(&self.store))
            .await
            .map(Some)
            .map_err(|error| Failure(format!("the factory could not reopen the store: {error}")))
    }
}
