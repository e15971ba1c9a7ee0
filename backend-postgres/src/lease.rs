//! The lease operations ([`LeaseBackend`]).
//!
//! Writes are single conditional statements where the contract allows
//! (`renew`, `renew_many`, `transition`, `claim_for_takeover`): the winning
//! path is one round trip, and only a refused write reads the row back to
//! say why, with the same `tenure_lease_core::backend::rules` judgements every backend uses.
//! `admit` must look before it writes: one call of the schema's
//! `admit_if_free` function takes its scopes' advisory locks (see the crate
//! docs), then admits if nothing holds them, or answers the holders for
//! `tenure_lease_core::backend::rules` to judge. Only an admission that interrupts holders,
//! or one on a session above `READ COMMITTED`, needs an explicit
//! transaction. An admission with a rate limit calls `admit_if_free_limited`
//! instead, which also judges the limit (see the crate docs,
//! [Rate limits](crate#rate-limits)). An admission with counted scopes
//! calls `admit_counted`, which also contends for the lowest free slot of
//! each (see the crate docs, [Counted scopes](crate#counted-scopes)).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Connection as _;
use sqlx::Row;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::backend::rules::{self, AdmissionPlan};
use tenure_lease_core::backend::stores::{Backend, LeaseBackend};
use tenure_lease_core::backend::telemetry;
use tenure_lease_core::release::Releases;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, Error, ExpiredQuery, ExpiredScan, LeaseRecord, NotTakenReason,
    Renewal, Result, Status, StatusChange, Takeover, TakeoverAction, TakeoverRequest, Timestamp,
    Transition, TransitionRejection,
};

use crate::decode::{self, Undecodable};
use crate::error::{
    constraint, sqlstate, store_error, DEADLOCK_DETECTED, SERIALIZATION_FAILURE, UNIQUE_VIOLATION,
};
use crate::rate;
use crate::statement::{self, BEGIN_READ_COMMITTED};
use crate::PgStore;

/// Attempts of one admission before a persistent race is answered `Conflict`.
const ADMIT_ATTEMPTS: usize = 3;

/// Attempts of a conditional write whose refusal the follow-up read cannot
/// explain (the row changed between the two statements).
pub(crate) const WRITE_ATTEMPTS: usize = 3;

/// A fence no row has (the schema keeps fences positive): stands in for a
/// claimed fence too large for `bigint`, which therefore matches nothing.
const NO_SUCH_FENCE: i64 = -1;

/// PostgreSQL's earliest `timestamptz` (4714-11-24 BC, midnight UTC), in
/// microseconds since the Unix epoch. Its latest lies beyond `chrono`'s.
const EARLIEST_TIMESTAMP_MICROS: i64 = -210_866_803_200_000_000;

/// The primary key whose violation means the id is taken.
const LEASES_PRIMARY_KEY: &str = "leases_pkey";

/// A grace or retention as an interval, rounded up to whole microseconds so
/// the server's comparisons agree with `tenure_lease_core::clock::is_before_end`.
pub(crate) fn interval_rounded_up(duration: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        microseconds: tenure_lease_core::clock::micros_rounded_up(duration),
    }
}

pub(crate) fn interval(duration: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        microseconds: i64::try_from(duration.as_micros()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn fence_param(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(NO_SUCH_FENCE)
}

pub(crate) fn changed_concurrently(operation: &str, id: &str) -> Error {
    Error::unavailable(format!(
        "{operation} of {id:?} was refused, but the record read back allowed it: \
         it changed concurrently {WRITE_ATTEMPTS} times; retry"
    ))
}

/// Why one admission attempt did not produce an answer.
enum AdmitFailure {
    /// The id exists.
    Duplicate,
    /// Lost to a concurrent transaction; worth another attempt. With the
    /// scope locks, overlapping admissions no longer get here: what is left
    /// is a deadlock with a transaction locking records in another order
    /// (another application), or a writer that takes no
    /// scope locks (an older version of this crate on the same schema).
    Race(sqlx::Error),
    /// Anything else: the answer.
    Store(Error),
}

impl AdmitFailure {
    /// The answer an attempt gives the caller, or the race that makes
    /// another attempt worthwhile.
    fn settle(
        attempt: std::result::Result<Admission, Self>,
        id: &str,
    ) -> std::result::Result<Result<Admission>, sqlx::Error> {
        match attempt {
            Ok(admission) => Ok(Ok(admission)),
            Err(AdmitFailure::Duplicate) => Ok(Err(Error::already_exists(id))),
            Err(AdmitFailure::Store(error)) => Ok(Err(error)),
            Err(AdmitFailure::Race(race)) => Err(race),
        }
    }
}

impl From<sqlx::Error> for AdmitFailure {
    fn from(error: sqlx::Error) -> Self {
        match sqlstate(&error).as_deref() {
            Some(UNIQUE_VIOLATION) if constraint(&error) == Some(LEASES_PRIMARY_KEY) => {
                AdmitFailure::Duplicate
            }
            Some(UNIQUE_VIOLATION | SERIALIZATION_FAILURE | DEADLOCK_DETECTED) => {
                AdmitFailure::Race(error)
            }
            _ => AdmitFailure::Store(store_error(error)),
        }
    }
}

impl From<Error> for AdmitFailure {
    fn from(error: Error) -> Self {
        AdmitFailure::Store(error)
    }
}

/// The records in `rows`; a corrupt row makes the whole answer `Corrupt`.
fn records(rows: &[PgRow]) -> Result<Vec<LeaseRecord>> {
    rows.iter().map(decode::trusted_record).collect()
}

/// Decides an admission on the active `holders` of its keys, as of `now`:
/// the slot of each counted scope (the one `chosen` names, else, in a full
/// scope, [`rules::choose_slot`] among its slots' holders, all in
/// `holders`), and the plan on them ([`rules::plan_admission`]). Without
/// counted scopes, no slot and the plan of any exclusive admission.
fn plan_admission(
    request: &AdmitRequest,
    chosen: &BTreeMap<String, u32>,
    holders: &[LeaseRecord],
    now: Timestamp,
) -> (BTreeMap<String, u32>, AdmissionPlan) {
    let mut slots = BTreeMap::new();
    for (scope, &capacity) in &request.capacities {
        let slot = chosen.get(scope).copied().unwrap_or_else(|| {
            let by_slot: Vec<Option<&LeaseRecord>> = (0..capacity)
                .map(|slot| {
                    holders
                        .iter()
                        .find(|holder| holder.slot(scope) == Some(slot))
                })
                .collect();
            rules::choose_slot(request, &by_slot, now)
        });
        slots.insert(scope.clone(), slot);
    }
    let plan = rules::plan_admission(request, &slots, holders, now);
    (slots, plan)
}

/// How `admit_if_free` treats the holders it finds.
#[derive(Debug, Clone, Copy)]
enum Holders {
    /// Reads them: on its own (autocommit) the call then writes nothing
    /// unless it admits, and holds nothing once it answers.
    Read,
    /// Locks them until the transaction ends, for the caller to interrupt.
    Lock,
}

/// What one call of the schema's `admit_if_free` function (or
/// `admit_if_free_limited`, or `admit_counted`) did, other than finding the
/// id taken (a [`AdmitFailure::Duplicate`]) or the rate log damaged (an
/// error).
enum AdmitIfFree {
    /// Nothing held the scopes: this record was admitted.
    Admitted(Box<LeaseRecord>),
    /// These records hold the scopes, as of `now`; nothing was written.
    /// `chosen`: the slot the call contended for in each counted scope
    /// but the full ones, whose holders are among `holders` (empty without
    /// counted scopes).
    Held {
        holders: Vec<LeaseRecord>,
        now: Timestamp,
        chosen: BTreeMap<String, u32>,
    },
    /// Nothing held the scopes, but the rate limit had no permit left:
    /// this answer; nothing was written.
    RateLimited(Box<Admission>),
    /// The session is not `READ COMMITTED`, where the function cannot see
    /// past its lock waits: nothing was done.
    Undecided,
}

impl PgStore {
    /// One attempt. Most admissions find their scopes free, or held by a
    /// record that blocks them: one autocommitted call admits or reads the
    /// holders, and a conflict is answered from what it read. Only an
    /// admission that interrupts (or one on a session whose isolation level
    /// the call refuses) needs an explicit transaction.
    async fn admit_once(
        &self,
        request: &AdmitRequest,
        metadata: &serde_json::Map<String, serde_json::Value>,
        retries: &mut u32,
    ) -> std::result::Result<Admission, AdmitFailure> {
        let mut session = self.sessions.take().await?;
        let answer = self
            .call_admit_if_free(&mut *session, request, metadata, Holders::Read, None)
            .await;
        session.keep_after(&answer);
        match Self::admit_if_free_answer(request, answer?)? {
            AdmitIfFree::Admitted(record) => {
                return Ok(Admission::Admitted {
                    record: *record,
                    interrupted: Vec::new(),
                })
            }
            AdmitIfFree::RateLimited(admission) => return Ok(*admission),
            AdmitIfFree::Held {
                holders,
                now,
                chosen,
            } => {
                if let (
                    _,
                    AdmissionPlan::Conflict {
                        holder,
                        retry_after,
                    },
                ) = plan_admission(request, &chosen, &holders, now)
                {
                    return Ok(Admission::Conflict {
                        holder,
                        retry_after,
                    });
                }
            }
            AdmitIfFree::Undecided => {}
        }
        self.admit_interrupting(request, metadata, retries).await
    }

    /// One transaction that locks the holders, decides, interrupts them and
    /// asks again: with its holders released, the call admits, or finds no
    /// permit left and the transaction rolls back. (It finds
    /// holders again only next to a writer that takes no scope locks; then
    /// the decision is taken once more, on them, and counted in `retries`.)
    async fn admit_interrupting(
        &self,
        request: &AdmitRequest,
        metadata: &serde_json::Map<String, serde_json::Value>,
        retries: &mut u32,
    ) -> std::result::Result<Admission, AdmitFailure> {
        let mut session = self.sessions.take().await?;
        let answer = self
            .admit_interrupting_on(&mut session, request, metadata, retries)
            .await;
        // Every answer commits or rolls back; a failure may leave the
        // transaction open (its ROLLBACK only queued), holding the scope
        // locks: the pool's check sends it at once.
        session.keep_if(answer.is_ok());
        answer
    }

    /// [`admit_interrupting`](Self::admit_interrupting) in a transaction on
    /// `session`.
    async fn admit_interrupting_on(
        &self,
        session: &mut PgConnection,
        request: &AdmitRequest,
        metadata: &serde_json::Map<String, serde_json::Value>,
        retries: &mut u32,
    ) -> std::result::Result<Admission, AdmitFailure> {
        // The scope locks only help if every statement after them sees what
        // the previous holder committed: a fresh snapshot per statement,
        // whatever the session's default isolation.
        let mut tx = session.begin_with(BEGIN_READ_COMMITTED).await?;
        let mut interrupted = Vec::new();
        // The slots decided under this transaction's locks, contended for
        // from then on (a request with counted scopes only).
        let mut fixed: Option<BTreeMap<String, u32>> = None;
        loop {
            let answer = self
                .call_admit_if_free(&mut *tx, request, metadata, Holders::Lock, fixed.as_ref())
                .await?;
            let (holders, now, chosen) = match Self::admit_if_free_answer(request, answer)? {
                AdmitIfFree::Admitted(record) => {
                    tx.commit().await?;
                    return Ok(Admission::Admitted {
                        record: *record,
                        interrupted,
                    });
                }
                AdmitIfFree::RateLimited(admission) => {
                    tx.rollback().await?;
                    return Ok(*admission);
                }
                AdmitIfFree::Held {
                    holders,
                    now,
                    chosen,
                } => {
                    if !interrupted.is_empty() {
                        *retries += 1;
                    }
                    (holders, now, chosen)
                }
                AdmitIfFree::Undecided => {
                    return Err(Error::unavailable(
                        "admit_if_free decided nothing in a READ COMMITTED transaction",
                    )
                    .into())
                }
            };
            let (slots, plan) = plan_admission(request, &chosen, &holders, now);
            let interrupt = match plan {
                AdmissionPlan::Conflict {
                    holder,
                    retry_after,
                } => {
                    tx.rollback().await?;
                    return Ok(Admission::Conflict {
                        holder,
                        retry_after,
                    });
                }
                AdmissionPlan::Proceed { interrupt } => interrupt,
            };
            let deciding = !request.capacities.is_empty() && fixed.is_none();
            if !request.capacities.is_empty() {
                fixed = Some(slots);
            }
            if interrupt.is_empty() {
                // Slots chosen in full scopes whose holders are gone: the
                // next call contends for them.
                if deciding {
                    continue;
                }
                return Err(Error::corrupt(format!(
                    "the holders of {:?} name none of its scopes",
                    request.scopes
                ))
                .into());
            }
            let rows = sqlx::query(&self.sql.interrupt)
                .bind(&interrupt)
                .bind(&request.owner)
                .bind(rules::INTERRUPTED_BY_ADMISSION)
                .bind(now)
                .fetch_all(&mut *tx)
                .await?;
            let mut by_id: HashMap<String, LeaseRecord> = records(&rows)?
                .into_iter()
                .map(|record| (record.id.clone(), record))
                .collect();
            for id in &interrupt {
                let record = by_id.remove(id).ok_or_else(|| {
                    Error::unavailable(format!("interrupted holder {id:?} vanished mid-admission"))
                })?;
                interrupted.push(record);
            }
        }
    }

    /// Calls the schema's `admit_if_free` function (see migration 0003),
    /// or `admit_if_free_limited` (migration 0013) for a request with a
    /// rate limit, or `admit_counted` (migration 0014) for one with counted
    /// scopes (contending for the `fixed` slots, else the lowest free
    /// ones): takes the scope locks, then admits if nothing holds the
    /// scopes (and the limit has a permit left), or answers the holders
    /// ([`admit_if_free_answer`](Self::admit_if_free_answer) reads which).
    async fn call_admit_if_free<'c>(
        &self,
        executor: impl sqlx::PgExecutor<'c>,
        request: &AdmitRequest,
        metadata: &serde_json::Map<String, serde_json::Value>,
        holders: Holders,
        fixed: Option<&BTreeMap<String, u32>>,
    ) -> sqlx::Result<Vec<PgRow>> {
        let scopes: Vec<&str> = request.scopes.iter().map(String::as_str).collect();
        if !request.capacities.is_empty() {
            return self
                .call_admit_counted(executor, request, &scopes, metadata, holders, fixed)
                .await;
        }
        let statement = match request.rate_limit {
            None => &self.sql.admit_if_free,
            Some(_) => &self.sql.admit_if_free_limited,
        };
        let query = sqlx::query(statement)
            .bind(self.scope_locks.keys(scopes.iter().copied()))
            .bind(&request.id)
            .bind(&scopes)
            .bind(&request.kind)
            .bind(&request.owner)
            .bind(request.ttl.map(interval))
            .bind(sqlx::types::Json(metadata))
            .bind(matches!(holders, Holders::Lock));
        match &request.rate_limit {
            None => query.fetch_all(executor).await,
            Some(limit) => {
                rate::bind(query, &self.scope_locks, limit)
                    .fetch_all(executor)
                    .await
            }
        }
    }

    /// [`call_admit_if_free`](Self::call_admit_if_free) for a request with
    /// counted scopes: a call of `admit_counted`.
    async fn call_admit_counted<'c>(
        &self,
        executor: impl sqlx::PgExecutor<'c>,
        request: &AdmitRequest,
        scopes: &[&str],
        metadata: &serde_json::Map<String, serde_json::Value>,
        holders: Holders,
        fixed: Option<&BTreeMap<String, u32>>,
    ) -> sqlx::Result<Vec<PgRow>> {
        // Validated to at most `limits::MAX_SCOPE_CAPACITY`.
        let as_integer = |number: u32| i32::try_from(number).unwrap_or(i32::MAX);
        let capacities: Vec<Option<i32>> = scopes
            .iter()
            .map(|scope| request.capacities.get(*scope).copied().map(as_integer))
            .collect();
        let fixed: Option<Vec<Option<i32>>> = fixed.map(|slots| {
            scopes
                .iter()
                .map(|scope| slots.get(*scope).copied().map(as_integer))
                .collect()
        });
        let query = sqlx::query(&self.sql.admit_counted)
            .bind(self.scope_locks.keys(scopes.iter().copied()))
            .bind(&request.id)
            .bind(scopes)
            .bind(capacities)
            .bind(fixed)
            .bind(&request.kind)
            .bind(&request.owner)
            .bind(request.ttl.map(interval))
            .bind(sqlx::types::Json(metadata))
            .bind(matches!(holders, Holders::Lock));
        match &request.rate_limit {
            Some(limit) => {
                rate::bind(query, &self.scope_locks, limit)
                    .fetch_all(executor)
                    .await
            }
            None => rate::bind_none(query).fetch_all(executor).await,
        }
    }

    /// The slot each counted scope of `request` contended for, as the
    /// `slots_chosen` column of `row` (an answer of `admit_counted`) says;
    /// a full scope has none.
    fn slots_chosen(request: &AdmitRequest, row: &PgRow) -> Result<BTreeMap<String, u32>> {
        if request.capacities.is_empty() {
            return Ok(BTreeMap::new());
        }
        let chosen: Vec<Option<i32>> = row.try_get("slots_chosen").map_err(store_error)?;
        if chosen.len() != request.scopes.len() {
            return Err(Error::corrupt(format!(
                "admit_counted answered {} slots for {} scopes",
                chosen.len(),
                request.scopes.len()
            )));
        }
        let mut slots = BTreeMap::new();
        for (scope, slot) in request.scopes.iter().zip(chosen) {
            let Some(&capacity) = request.capacities.get(scope) else {
                continue;
            };
            let Some(slot) = slot else { continue };
            let slot = u32::try_from(slot)
                .ok()
                .filter(|slot| *slot < capacity)
                .ok_or_else(|| {
                    Error::corrupt(format!(
                        "admit_counted chose slot {slot} of {scope:?}, of capacity {capacity}"
                    ))
                })?;
            slots.insert(scope.clone(), slot);
        }
        Ok(slots)
    }

    /// What the rows of [`call_admit_if_free`](Self::call_admit_if_free)
    /// for `request` answer.
    fn admit_if_free_answer(
        request: &AdmitRequest,
        rows: Vec<PgRow>,
    ) -> std::result::Result<AdmitIfFree, AdmitFailure> {
        let Some(first) = rows.first() else {
            return Ok(AdmitIfFree::Undecided);
        };
        let outcome = first.try_get::<&str, _>("outcome")?;
        match (outcome, &request.rate_limit) {
            ("admitted", _) => Ok(AdmitIfFree::Admitted(Box::new(decode::trusted_record(
                first,
            )?))),
            ("taken", _) => Err(AdmitFailure::Duplicate),
            ("held", _) => Ok(AdmitIfFree::Held {
                holders: records(&rows)?,
                now: decode::instant(first, "store_now")?,
                chosen: Self::slots_chosen(request, first)?,
            }),
            ("rate_limited", Some(limit)) => {
                let uses = rate::stored_log(first, limit)?;
                let now = decode::instant(first, "store_now")?;
                Ok(AdmitIfFree::RateLimited(Box::new(Admission::RateLimited {
                    key: limit.key.clone(),
                    retry_after: rate_rules::next_permit_in(&uses, limit, now)
                        .unwrap_or(Duration::ZERO),
                })))
            }
            ("rate_log_damaged", Some(limit)) => Err(rate::damaged(first, limit).into()),
            (other, _) => Err(Error::corrupt(format!("admit_if_free answered {other:?}")).into()),
        }
    }

    /// After every attempt lost a race: `Conflict` with the blocking holder
    /// (or, if none blocks, the first holder in scope order), when the
    /// scopes are held at all.
    async fn visible_conflict(&self, request: &AdmitRequest) -> Result<Option<Admission>> {
        let scopes: Vec<&str> = request.scopes.iter().map(String::as_str).collect();
        let counted = !request.capacities.is_empty();
        let statement = if counted {
            &self.sql.read_slot_holders
        } else {
            &self.sql.read_holders
        };
        let rows = self
            .fetch_all(|| sqlx::query(statement).bind(&scopes))
            .await?;
        let now = LeaseBackend::now(self).await?;
        let holders = records(&rows)?;
        let first = match plan_admission(request, &BTreeMap::new(), &holders, now).1 {
            AdmissionPlan::Conflict {
                holder,
                retry_after,
            } => Some((holder, retry_after)),
            // With counted scopes, only the holders of the slots it would
            // take: the first the plan names.
            AdmissionPlan::Proceed { interrupt } if counted => interrupt
                .first()
                .and_then(|id| holders.iter().find(|holder| holder.id == *id))
                .map(|holder| {
                    let retry_after = rules::retry_after(holder, request.grace, now);
                    (holder.clone(), retry_after)
                }),
            AdmissionPlan::Proceed { .. } => holders.into_iter().next().map(|holder| {
                let retry_after = rules::retry_after(&holder, request.grace, now);
                (holder, retry_after)
            }),
        };
        Ok(first.map(|(holder, retry_after)| Admission::Conflict {
            holder,
            retry_after,
        }))
    }

    /// Up to [`ADMIT_ATTEMPTS`] attempts, then the answer after lost races;
    /// counts in `retries` every decision taken again after a lost race.
    async fn admit_retrying(
        &self,
        request: &AdmitRequest,
        metadata: &serde_json::Map<String, serde_json::Value>,
        retries: &mut u32,
    ) -> Result<Admission> {
        for attempt in 1..=ADMIT_ATTEMPTS {
            match AdmitFailure::settle(
                self.admit_once(request, metadata, retries).await,
                &request.id,
            ) {
                Ok(answer) => return answer,
                Err(race) => {
                    tracing::debug!(id = %request.id, attempt, error = %race, "admission raced");
                    *retries += 1;
                }
            }
        }
        if let Some(conflict) = self.visible_conflict(request).await? {
            return Ok(conflict);
        }
        // Nothing holds the scopes: a conflict would name no holder and an
        // error would say nothing the store cannot decide. The answer is
        // the decision itself, taken once more under the scope locks.
        AdmitFailure::settle(
            self.admit_once(request, metadata, retries).await,
            &request.id,
        )
        .unwrap_or_else(|race| {
            Err(Error::unavailable(format!(
                "admission of {:?} lost every race on its scopes, which are free; retry",
                request.id
            ))
            .with_source(race))
        })
    }

    /// `renew` of a valid claim, recording `progress` when given.
    async fn renew_record(
        &self,
        claim: &Claim,
        ttl: Duration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Renewal> {
        self.write_or_explain(
            ("renewal", &claim.id),
            || {
                statement::renewal(
                    (&self.sql.renew, &self.sql.renew_with_progress),
                    (&claim.id, &claim.owner, claim.fence),
                    ttl,
                    progress,
                )
            },
            |row| {
                let expires_at = decode::instant(row, "lease_expires_at").map_err(store_error)?;
                Ok(Renewal::Renewed { expires_at })
            },
            move || async move {
                let record = self.read_record(&claim.id).await?;
                Ok(rules::judge_renewal(record.as_ref(), claim)
                    .err()
                    .map(Renewal::Lost))
            },
        )
        .await
    }

    async fn read_record(&self, id: &str) -> Result<Option<LeaseRecord>> {
        let row = self
            .fetch_optional(|| sqlx::query(&self.sql.get).bind(id))
            .await?;
        row.as_ref().map(decode::trusted_record).transpose()
    }

    /// The record as it is now, with the server's clock.
    async fn read_record_at_now(&self, id: &str) -> Result<Option<(Timestamp, LeaseRecord)>> {
        let row = self
            .fetch_optional(|| sqlx::query(&self.sql.get_with_now).bind(id))
            .await?;
        let Some(row) = row else { return Ok(None) };
        let now = decode::instant(&row, "store_now").map_err(store_error)?;
        Ok(Some((now, decode::trusted_record(&row)?)))
    }

    /// Runs a counting purge `statement`, or its dry count (`$1` the
    /// retention, answering `purged`), and answers the count.
    pub(crate) async fn purge_older_than(
        &self,
        statement: &str,
        retention: Duration,
    ) -> Result<u64> {
        let row = self
            .fetch_optional(|| sqlx::query(statement).bind(interval_rounded_up(retention)))
            .await?
            .ok_or_else(|| Error::corrupt("purge answered no count"))?;
        let purged: i64 = row.try_get("purged").map_err(store_error)?;
        u64::try_from(purged).map_err(|_| Error::corrupt(format!("purge answered count {purged}")))
    }
}

#[async_trait]
impl LeaseBackend for PgStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get(), metadata.get());
        let mut retries = 0;
        let answer = self.admit_retrying(request, metadata, &mut retries).await;
        telemetry::admit_retried(Self::SYSTEM, &request.id, retries);
        answer
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.renew_record(claim, ttl, None).await
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.renew_record(claim, ttl, Some(progress)).await
    }
    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        // One row per distinct claim: a repeated claim shares its outcome.
        let mut distinct: Vec<Checked<&Claim>> = Vec::new();
        let mut position_of: HashMap<&Claim, usize> = HashMap::new();
        let slots: Vec<usize> = claims
            .each()
            .map(|claim| {
                *position_of.entry(claim.get()).or_insert_with(|| {
                    distinct.push(claim);
                    distinct.len() - 1
                })
            })
            .collect();
        let ids: Vec<&str> = distinct.iter().map(|claim| claim.id.as_str()).collect();
        let owners: Vec<&str> = distinct.iter().map(|claim| claim.owner.as_str()).collect();
        let fences: Vec<i64> = distinct
            .iter()
            .map(|claim| fence_param(claim.fence))
            .collect();
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.renew_many)
                    .bind(&ids)
                    .bind(&owners)
                    .bind(&fences)
                    .bind(interval(ttl.get()))
            })
            .await?;
        let mut renewed: Vec<Option<Timestamp>> = vec![None; distinct.len()];
        for row in &rows {
            let position: i64 = row.try_get("position").map_err(store_error)?;
            let expires_at = decode::instant(row, "lease_expires_at").map_err(store_error)?;
            let slot = position
                .checked_sub(1)
                .and_then(|slot| usize::try_from(slot).ok())
                .filter(|slot| *slot < distinct.len())
                .ok_or_else(|| {
                    Error::corrupt(format!("renew_many answered unknown position {position}"))
                })?;
            renewed[slot] = Some(expires_at);
        }
        let refused: Vec<&str> = distinct
            .iter()
            .zip(&renewed)
            .filter(|(_, renewed)| renewed.is_none())
            .map(|(claim, _)| claim.id.as_str())
            .collect();
        let mut records: HashMap<String, LeaseRecord> = HashMap::new();
        if !refused.is_empty() {
            let rows = self
                .fetch_all(|| sqlx::query(&self.sql.get_many).bind(&refused))
                .await?;
            for row in &rows {
                let record = decode::trusted_record(row)?;
                records.insert(record.id.clone(), record);
            }
        }
        let mut outcomes = Vec::with_capacity(distinct.len());
        for (claim, renewed) in distinct.iter().zip(renewed) {
            if let Some(expires_at) = renewed {
                outcomes.push(Renewal::Renewed { expires_at });
                continue;
            }
            match rules::judge_renewal(records.get(&claim.id), claim.get()) {
                Err(reason) => outcomes.push(Renewal::Lost(reason)),
                // Refused by a write that waited for a concurrent change the
                // statement's snapshot cannot show: ask again on its own.
                Ok(()) => outcomes.push(self.renew(*claim, ttl).await?),
            }
        }
        Ok(slots.into_iter().map(|slot| outcomes[slot]).collect())
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let allowed_from: Vec<&str> = Status::ALL
            .into_iter()
            .filter(|from| from.can_become(change.status))
            .map(Status::as_str)
            .collect();
        self.write_or_explain(
            ("transition", &claim.id),
            || {
                sqlx::query(&self.sql.transition)
                    .bind(&claim.id)
                    .bind(&claim.owner)
                    .bind(fence_param(claim.fence))
                    .bind(change.status.as_str())
                    .bind(change.error.as_deref())
                    .bind(change.stop_reason.as_deref())
                    .bind(&allowed_from)
            },
            |row| Ok(Transition::Applied(decode::trusted_record(row)?)),
            move || async move {
                let Some(record) = self.read_record(&claim.id).await? else {
                    return Ok(Some(Transition::Rejected(TransitionRejection::Missing)));
                };
                Ok(rules::judge_transition(Some(&record), claim, change.status)
                    .err()
                    .map(Transition::Rejected))
            },
        )
        .await
    }

    async fn releases(&self) -> Result<Option<Releases>> {
        let releases = self
            .releases
            .subscribe(|board| crate::releases::listen(self.pool(), self.schema.as_str(), board))
            .await?;
        Ok(Some(releases))
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        let (status, error, stop_reason, adopt_ttl) = match &request.action {
            TakeoverAction::Fail { error, stop_reason } => (
                Status::Failed,
                Some(error.as_str()),
                stop_reason.as_deref(),
                None,
            ),
            TakeoverAction::Adopt { ttl } => (Status::Running, None, None, *ttl),
        };
        let adopt = status == Status::Running;
        self.write_or_explain(
            ("takeover", &request.id),
            || {
                sqlx::query(&self.sql.take_over)
                    .bind(&request.id)
                    .bind(&request.claimer)
                    .bind(status.as_str())
                    .bind(error)
                    .bind(stop_reason)
                    .bind(adopt)
                    .bind(adopt_ttl.map(interval))
                    .bind(interval_rounded_up(request.grace))
            },
            |row| Ok(Takeover::Taken(decode::trusted_record(row)?)),
            move || async move {
                let Some((now, record)) = self.read_record_at_now(&request.id).await? else {
                    return Ok(Some(Takeover::NotTaken(NotTakenReason::Missing)));
                };
                Ok(rules::judge_takeover(Some(&record), request.grace, now)
                    .err()
                    .map(Takeover::NotTaken))
            },
        )
        .await
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
        let mut scan = ExpiredScan::default();
        if query.created_before.is_some_and(|instant| {
            tenure_lease_core::clock::to_micros(instant) < EARLIEST_TIMESTAMP_MICROS
        }) {
            // No record is older than PostgreSQL's calendar, which refuses
            // the bound itself.
            return Ok(scan);
        }
        let mut offset: i64 = 0;
        // Undecodable rows take no place in the answer: page on until the
        // limit is filled with good records or the matches run out.
        while scan.records.len() < query.limit {
            let wanted = query.limit - scan.records.len();
            let rows = self
                .fetch_all(|| {
                    sqlx::query(&self.sql.list_expired)
                        .bind(interval_rounded_up(query.grace))
                        .bind(query.created_before)
                        .bind(wanted as i64)
                        .bind(offset)
                })
                .await?;
            offset += rows.len() as i64;
            for row in &rows {
                match decode::record(row) {
                    Ok(record) => scan.records.push(record),
                    Err(Undecodable { id, reason }) => {
                        tracing::warn!(
                            schema = self.schema(),
                            id = %id,
                            reason = %reason,
                            "list_expired skipped an undecodable lease record"
                        );
                        scan.skipped.push(Undecodable { id, reason }.into_skipped());
                    }
                }
            }
            if rows.len() < wanted {
                break;
            }
        }
        Ok(scan)
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        self.read_record(id).await
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get();
        let rows = self
            .fetch_all(|| sqlx::query(&self.sql.list_by_scope).bind(scope))
            .await?;
        records(&rows)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let rows = self
            .fetch_all(|| sqlx::query(&self.sql.list_active))
            .await?;
        records(&rows)
    }

    async fn now(&self) -> Result<Timestamp> {
        let row = self
            .fetch_optional(|| sqlx::query("SELECT now() AS store_now"))
            .await?
            .ok_or_else(|| Error::corrupt("SELECT now() answered no row"))?;
        decode::instant(&row, "store_now").map_err(store_error)
    }

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        self.purge_older_than(&self.sql.purge, terminal_older_than)
            .await
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        self.purge_older_than(&self.sql.count_purgeable, terminal_older_than.get())
            .await
    }
}
