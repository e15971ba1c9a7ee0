//! Once per tick across hosts ([contract §14](tenure_lease_core::contract)): a named
//! schedule whose every tick is delivered by exactly one of the hosts that
//! run it, under that tick's own lease and fence.
//!
//! Why it is shaped this way:
//! * **The tick is the id.** Ticks are a fixed interval aligned to the Unix
//!   epoch ([`Schedule::every`]) or the occurrences of a cron expression in
//!   a time zone ([`Schedule::cron`]), and a tick's run id is derived from
//!   the schedule's name and the tick's start ([`Schedule::run_id`]). Every host admits that id
//!   ([`AdmitStrategy::Reject`](tenure_lease_core::AdmitStrategy::Reject), the
//!   default): the store creates it once, and every other host is answered
//!   `AlreadyExists`, so the tick has one winner however many hosts race.
//! * **The store's clock says which tick is due** ([`LeaseStore::now`]), so
//!   hosts whose clocks disagree still agree on the tick.
//! * **The delivery is a held run.** The winner's keeper renews the run's
//!   lease while the delivery runs as its registered task; success
//!   completes the run, an error fails it (visible as a `Failed` record with
//!   the error), a loss aborts it.
//! * **A missed tick leaves a hole.** A tick nobody fired has no record, so
//!   the winner of a tick looks back for the holes before it (up to
//!   [`Schedule::lookback`] ticks) and reports them ([`Missed`]). A winner
//!   whose admission was answered after its tick ended (by the store's
//!   clock, read once the answer is in), or after the next tick was
//!   already admitted, or that cannot read whether it did, does not deliver
//!   (the run is completed `Failed`, [`LATE`]): the next tick's winner may
//!   already have reported it missed, and a tick is never both reported
//!   missed and delivered.
//! * **Wall clocks are mapped to instants once, the same way on every
//!   host.** A cron time the clocks skip (a daylight-saving gap) ticks at
//!   the gap's end (the first whole minute that exists again); one they
//!   repeat ticks once, at its first occurrence; a cron time that lands on
//!   the same instant as another is one tick.
//! * **A purged tick can fire again.** Only a tick's run record stops a
//!   second delivery: keep finished runs (`purge` retention) for longer
//!   than the longest tick (a cron schedule's longest gap between two
//!   times: 72 hours for `0 9 * * MON-FRI`) and than the look-back
//!   horizon, or purged ticks are reported missed.
//!
//! [`LeaseStore::now`]: tenure_lease_core::LeaseStore::now

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{LocalResult, NaiveDateTime, Offset, SecondsFormat, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use futures_util::future::BoxFuture;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::election::{release, work_ended, AbortOnDrop, Stop};
use super::{AdmitOutcome, Keeper, KeeperError, LossCause, OwnershipLost, RunGuard};
use tenure_lease_core::backend::validate;
use tenure_lease_core::clock::{self, Timestamp};
use tenure_lease_core::StatusChange;
use tenure_lease_core::{Claim, LeaseRecord};
use tenure_lease_core::{Error, ErrorKind};

/// The kind of the records a [`Schedule`] admits, one per fired tick.
pub const SCHEDULE_KIND: &str = "schedule";

/// How many ticks back a winner looks for missed ones unless told otherwise.
pub const DEFAULT_LOOKBACK: u32 = 64;

/// The most ticks a winner may look back.
pub const MAX_LOOKBACK: u32 = 10_000;

/// The shortest tick interval.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The longest tick interval (366 days).
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 24 * 3600);

/// The error written on a tick's run whose winner did not deliver because
/// it was late: its admission was answered after the tick ended (by the
/// store's clock), or after the next tick's run was admitted (whose winner
/// may already have reported this tick missed; a tick is never both
/// reported missed and delivered), or a read that would tell failed.
pub const LATE: &str = "late: admitted after its tick ended or after the next tick fired, or \
     unable to tell; not delivered";

/// The longest tick start as a run id renders it, to check name lengths.
const WIDEST_TICK: &str = "0000-01-01T00:00:00.000000Z";

/// The longest run of wall-clock time a zone has ever skipped (Samoa
/// skipped 30 December 2011), in minutes: how far past a skipped cron time
/// its tick is looked for.
const LONGEST_GAP_MINUTES: i64 = 24 * 60;

/// A named schedule of ticks, each delivered once among every host that
/// fires it ([contract §14](tenure_lease_core::contract)): every `interval`,
/// aligned to the Unix epoch (tick `n` starts at `n × interval` after
/// 1970-01-01T00:00:00Z; [`every`](Schedule::every)), or at the
/// occurrences of a cron expression in a time zone
/// ([`cron`](Schedule::cron)).
///
/// The store's clock says which tick is due, so hosts whose clocks disagree
/// still agree on it. A tick's run id is derived from the name and the
/// tick ([`run_id`](Schedule::run_id)) and admitted with
/// [`AdmitStrategy::Reject`](tenure_lease_core::AdmitStrategy::Reject): the store
/// creates it once and answers every other host `AlreadyExists`. The
/// winner's delivery runs under the run's lease and fence (a held run:
/// success completes it, an error fails it, a loss aborts it). A tick
/// nobody fired has no record, so each winner looks back for such holes
/// (up to [`lookback`](Schedule::lookback) ticks) and reports them
/// ([`Missed`]). Keep finished runs (`purge` retention) for longer than
/// the longest tick (the interval, or a cron schedule's longest gap
/// between two times: 72 hours for `0 9 * * MON-FRI`), since a purged
/// tick's run no longer stops a second delivery of it while the tick is
/// in progress, and longer than the horizon, or purged ticks are reported
/// missed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use tenure_backend_memory::MemoryStore;
/// use tenure_keeper::{Keeper, KeeperConfig, Schedule, TickOutcome};
/// use tokio::time::Instant;
///
/// let store = Arc::new(MemoryStore::new());
/// let keeper = Keeper::builder(store, KeeperConfig::with_ttl(Duration::from_secs(10))).start()?;
/// let schedule = Schedule::every("report", Duration::from_secs(3600))?;
/// // Every host calls this (a `Ticker` does it at each tick): one delivers.
/// let outcome = schedule
///     .fire_due(&keeper, |firing| async move {
///         println!("tick {} under fence {}", firing.tick(), firing.fence());
///         Ok::<(), std::io::Error>(())
///     })
///     .await?;
/// assert!(matches!(outcome, TickOutcome::Delivered { .. }));
/// let again = schedule.fire_due(&keeper, |_| async { Ok::<(), std::io::Error>(()) }).await?;
/// assert!(matches!(again, TickOutcome::Elsewhere { .. }), "one delivery per tick");
/// keeper.shutdown(Instant::now() + Duration::from_secs(5)).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    name: String,
    cadence: Cadence,
    lookback: u32,
}

/// Where a schedule's ticks start.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cadence {
    /// Every interval, aligned to the Unix epoch.
    Every(Duration),
    /// At the occurrences of a cron expression in a time zone (boxed: a
    /// parsed expression is large beside an interval).
    Cron(Box<CronTimes>),
}

/// One tick of a [`Schedule`]: `[start, end)` in store time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick {
    start: Timestamp,
    end: Timestamp,
}

impl Tick {
    /// When the tick starts (store time).
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// When the next tick starts (store time).
    pub fn end(&self) -> Timestamp {
        self.end
    }

    /// Whether `instant` falls within the tick.
    pub fn contains(&self, instant: Timestamp) -> bool {
        self.start <= instant && instant < self.end
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.start.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

impl Schedule {
    /// A schedule named `name` ticking every `interval`, looking back
    /// [`DEFAULT_LOOKBACK`] ticks for missed ones.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when a run id made of `name` would not be
    /// a valid lease id (empty, control characters, too long), or when the
    /// interval is outside [`MIN_INTERVAL`] to [`MAX_INTERVAL`] or not a
    /// whole number of microseconds.
    pub fn every(name: impl Into<String>, interval: Duration) -> Result<Self, Error> {
        let name = run_name(name.into())?;
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval)
            || interval.subsec_nanos() % 1_000 != 0
        {
            return Err(Error::invalid_input(
                "interval",
                format_args!(
                    "{interval:?} must be a whole number of microseconds from {MIN_INTERVAL:?} to {MAX_INTERVAL:?}"
                ),
            ));
        }
        Ok(Schedule {
            name,
            cadence: Cadence::Every(interval),
            lookback: DEFAULT_LOOKBACK,
        })
    }

    /// A schedule named `name` ticking at the times a five-field cron
    /// `expression` (minute, hour, day of month, month, day of week; `*`,
    /// lists, ranges, steps, names such as `MON` and `JAN`, and `@daily`
    /// and the other nicknames) names on the wall clocks of `time_zone`
    /// (an IANA name such as `Europe/Berlin`, or `UTC`), looking back
    /// [`DEFAULT_LOOKBACK`] ticks for missed ones. Each tick lasts until
    /// the next one starts.
    ///
    /// Daylight-saving changes: a time the clocks skip ticks at the end of
    /// the gap (`30 2 * * *` in `America/New_York` ticks at 03:00 on the
    /// day clocks go from 02:00 to 03:00); a time they repeat ticks once,
    /// at its first occurrence (`30 1 * * *` on the day 01:00–02:00 happens
    /// twice); two times landing on one instant are one tick. When both day
    /// fields are restricted, a day matching either is a day of the
    /// schedule, as in Vixie cron.
    ///
    /// A tick lasts until the next time, so keep finished runs for longer
    /// than the longest gap between two times (72 hours for weekdays), or a
    /// host started during a long tick may deliver it again after its run
    /// was purged.
    ///
    /// ```
    /// use tenure_keeper::Schedule;
    ///
    /// let weekdays = Schedule::cron("digest", "0 9 * * MON-FRI", "Europe/Berlin")?;
    /// let tick = weekdays.tick_at("2026-12-07T10:00:00Z".parse()?);
    /// // 09:00 in Berlin, an hour ahead of UTC in December.
    /// assert_eq!(weekdays.run_id(tick), "digest@2026-12-07T08:00:00Z");
    /// assert_eq!(tick.end(), "2026-12-08T08:00:00Z".parse::<chrono::DateTime<chrono::Utc>>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when `name` cannot name runs (as for
    /// [`every`](Schedule::every)), when `expression` is not a five-field
    /// cron expression or names no time that exists (`0 0 30 2 *`), or when
    /// `time_zone` is not a time zone of the IANA database.
    pub fn cron(name: impl Into<String>, expression: &str, time_zone: &str) -> Result<Self, Error> {
        let name = run_name(name.into())?;
        let zone: Tz = time_zone.parse().map_err(|_| {
            Error::invalid_input(
                "time_zone",
                format_args!(
                    "{time_zone:?} is not a time zone of the IANA database (e.g. \"Europe/Berlin\", \"UTC\")"
                ),
            )
        })?;
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|error| {
                Error::invalid_input(
                    "cron",
                    format_args!(
                        "{expression:?} is not a five-field cron expression (minute hour day-of-month month day-of-week): {error}"
                    ),
                )
            })?;
        let times = CronTimes {
            expression: expression.to_owned(),
            cron,
            zone,
        };
        let reference = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
        if reference.and_then(|at| times.start_after(at)).is_none() {
            return Err(Error::invalid_input(
                "cron",
                format_args!("{expression:?} names no time that exists"),
            ));
        }
        Ok(Schedule {
            name,
            cadence: Cadence::Cron(Box::new(times)),
            lookback: DEFAULT_LOOKBACK,
        })
    }

    /// Sets how many ticks back a winner looks for missed ones.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] outside 1 to [`MAX_LOOKBACK`].
    pub fn lookback(mut self, ticks: u32) -> Result<Self, Error> {
        if !(1..=MAX_LOOKBACK).contains(&ticks) {
            return Err(Error::invalid_input(
                "lookback",
                format_args!("{ticks} is outside 1..={MAX_LOOKBACK}"),
            ));
        }
        self.lookback = ticks;
        Ok(self)
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The time between ticks of a fixed-interval schedule; `None` for a
    /// cron schedule, whose ticks are as far apart as its expression says.
    pub fn interval(&self) -> Option<Duration> {
        match &self.cadence {
            Cadence::Every(interval) => Some(*interval),
            Cadence::Cron(_) => None,
        }
    }

    /// A cron schedule's expression and time zone (its IANA name).
    pub fn cron_expression(&self) -> Option<(&str, &str)> {
        match &self.cadence {
            Cadence::Every(_) => None,
            Cadence::Cron(times) => Some((&times.expression, times.zone.name())),
        }
    }

    /// How many ticks back a winner looks for missed ones.
    pub fn lookback_ticks(&self) -> u32 {
        self.lookback
    }

    /// The tick `instant` (store time) falls in.
    pub fn tick_at(&self, instant: Timestamp) -> Tick {
        let tick = match &self.cadence {
            Cadence::Every(interval) => {
                let step = clock::micros_rounded_up(*interval);
                let micros = clock::to_micros(instant);
                tick_of(*interval, micros - micros.rem_euclid(step))
            }
            Cadence::Cron(times) => times
                .start_at_or_before(instant)
                .and_then(|start| times.tick_starting(start)),
        };
        // Only far from any store time: at the ends of chrono's range, or
        // for a cron schedule outside the years 1 to 5000 croner searches.
        tick.unwrap_or(Tick {
            start: instant,
            end: clock::add(instant, self.interval().unwrap_or(MIN_INTERVAL)),
        })
    }

    /// The tick after `tick`; `None` past the representable range.
    pub fn tick_after(&self, tick: Tick) -> Option<Tick> {
        match &self.cadence {
            Cadence::Every(interval) => tick_of(*interval, clock::to_micros(tick.end)),
            Cadence::Cron(times) => times.tick_starting(tick.end),
        }
    }

    /// The tick before `tick`; `None` before the representable range (or
    /// before a cron expression's first time).
    pub fn tick_before(&self, tick: Tick) -> Option<Tick> {
        match &self.cadence {
            Cadence::Every(interval) => tick_of(
                *interval,
                clock::to_micros(tick.start).checked_sub(clock::micros_rounded_up(*interval))?,
            ),
            Cadence::Cron(times) => {
                let start = times.start_at_or_before(
                    tick.start.checked_sub_signed(TimeDelta::microseconds(1))?,
                )?;
                times.tick_starting(start)
            }
        }
    }

    /// The run id of `tick`: `"{name}@{start}"`, the start in RFC 3339 UTC
    /// (e.g. `report@2026-11-29T00:00:00Z`).
    pub fn run_id(&self, tick: Tick) -> String {
        format!("{}@{tick}", self.name)
    }

    /// Fires the tick that is due now by the store's clock: admits its run
    /// and, when this host wins, looks back for missed ticks, then runs
    /// `deliver` as the run's registered task (aborted if the lease is
    /// lost) and completes the run `Succeeded`, or `Failed` with the error
    /// it answers. Answers what happened; losing the race is
    /// [`TickOutcome::Elsewhere`].
    ///
    /// # Errors
    ///
    /// [`KeeperError`] when the store's clock or the admission could not be
    /// read or decided (nothing was delivered; an admission whose answer
    /// was lost may have created the run, which then expires undelivered
    /// and is recovered as an orphan), or when the keeper takes no leases.
    ///
    /// # Cancellation
    ///
    /// Dropping the future aborts the delivery; the run is then left to
    /// expire (a reconciler fails it as orphaned).
    pub async fn fire_due<F, Fut, E>(
        &self,
        keeper: &Keeper,
        deliver: F,
    ) -> Result<TickOutcome, KeeperError>
    where
        F: FnOnce(Firing) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + 'static,
    {
        let now = store_now(keeper).await?;
        self.fire(keeper, self.tick_at(now), |firing| {
            let delivery = deliver(firing);
            async move { delivery.await.map_err(|error| error.to_string()) }
        })
        .await
    }

    async fn fire<F, Fut>(
        &self,
        keeper: &Keeper,
        tick: Tick,
        deliver: F,
    ) -> Result<TickOutcome, KeeperError>
    where
        F: FnOnce(Firing) -> Fut,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let request = keeper
            .request(self.run_id(tick))
            .kind(SCHEDULE_KIND)
            .metadata(serde_json::json!({ "schedule": &self.name, "tick": tick.to_string() }));
        let guard = match keeper.admit(request).await {
            Ok(AdmitOutcome::Admitted { guard, .. }) => guard,
            Ok(AdmitOutcome::Conflict { .. }) => return Ok(TickOutcome::Elsewhere { tick }),
            Ok(AdmitOutcome::RateLimited { key, .. }) => {
                // The tick's request names no rate limit: the store is wrong.
                return Err(KeeperError::Store(tenure_lease_core::Error::unavailable(
                    format!("a tick's admission, which names no rate limit, was rate limited by {key:?}"),
                )));
            }
            Err(KeeperError::Store(error)) if error.kind() == ErrorKind::AlreadyExists => {
                return Ok(TickOutcome::Elsewhere { tick })
            }
            Err(error) => return Err(error),
        };
        let reads = Reads(keeper);
        if self.is_late(&reads, tick).await {
            // A refused or unconfirmed write is logged by `release`; the
            // run is not delivered either way.
            let _ = release(&guard, StatusChange::failed(LATE)).await;
            return Ok(TickOutcome::Late { tick });
        }
        let missed = self.look_back(&reads, tick).await;
        let fence = guard.fence();
        let firing = Firing {
            guard: guard.clone(),
            tick,
            missed: missed.clone(),
        };
        let mut delivery = AbortOnDrop(guard.spawn(|_| deliver(firing)));
        let error = match (&mut delivery.0).await {
            Ok(Ok(())) => {
                return Ok(match release(&guard, StatusChange::succeeded()).await {
                    Ok(()) => TickOutcome::Delivered {
                        tick,
                        fence,
                        missed,
                    },
                    Err(cause) => TickOutcome::Lost {
                        tick,
                        fence,
                        missed,
                        cause,
                        delivered: true,
                    },
                })
            }
            Ok(Err(error)) => error,
            Err(error) => match work_ended(&guard, error) {
                Ok(panicked) => panicked,
                Err(cause) => {
                    return Ok(TickOutcome::Lost {
                        tick,
                        fence,
                        missed,
                        cause,
                        delivered: false,
                    })
                }
            },
        };
        let _ = release(&guard, StatusChange::failed(&error)).await;
        Ok(TickOutcome::DeliveryFailed {
            tick,
            fence,
            missed,
            error,
        })
    }

    /// Whether the winner of `tick` must not deliver: the tick had ended
    /// by the store's clock once the admission was answered, or the next
    /// tick's run already exists, or a read that would tell failed (a tick
    /// is never both reported missed and delivered, so not knowing counts
    /// as late; the run is left `Failed`, visible, rather than delivered
    /// twice).
    ///
    /// The clock is read after the admission, not taken from the record's
    /// `created_at`: a store may stamp a record when its transaction
    /// starts (PostgreSQL's `now()`) and commit it much later, after a
    /// later tick's winner looked back and found no run for this tick. A
    /// clock read after the answer that is still inside the tick shows the
    /// run was visible before the tick ended, so before any later tick's
    /// winner (admitted after the tick, by the same clock) could look back.
    async fn is_late(&self, reads: &Reads<'_>, tick: Tick) -> bool {
        match store_now(reads.0).await {
            Ok(now) if now >= tick.end => return true,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(schedule = %self.name, %tick, %error, "could not read the store's clock after the admission; not delivering");
                return true;
            }
        }
        let Some(next) = self.tick_after(tick) else {
            return false;
        };
        match reads.get(&self.run_id(next)).await {
            Ok(found) => found.is_some(),
            Err(error) => {
                tracing::warn!(schedule = %self.name, %tick, %error, "could not tell whether the next tick fired; not delivering");
                true
            }
        }
    }

    /// The ticks before `tick` that never fired, back to the last one that
    /// did.
    async fn look_back(&self, reads: &Reads<'_>, tick: Tick) -> Missed {
        let mut missed = Vec::new();
        let mut earlier = tick;
        for _ in 0..self.lookback {
            let Some(before) = self.tick_before(earlier) else {
                break;
            };
            earlier = before;
            match reads.get(&self.run_id(earlier)).await {
                Ok(Some(_)) => {
                    missed.reverse();
                    if !missed.is_empty() {
                        tracing::warn!(schedule = %self.name, %tick, missed = missed.len(), "ticks before this one never fired");
                    }
                    return Missed::Ticks(missed);
                }
                Ok(None) => missed.push(earlier),
                Err(error) => {
                    tracing::warn!(schedule = %self.name, %tick, %error, "could not look back for missed ticks");
                    return Missed::Unknown;
                }
            }
        }
        Missed::BeyondHorizon
    }
}

/// `name`, when runs can be named after it and any tick.
fn run_name(name: String) -> Result<String, Error> {
    let names_runs = validate::lease_id(&name)
        .and_then(|()| validate::lease_id(&format!("{name}@{WIDEST_TICK}")));
    if names_runs.is_err() {
        return Err(Error::invalid_input(
            "name",
            format_args!(
                "{name:?} cannot name runs: it must be 1 to {} bytes without control characters",
                validate::MAX_NAME_BYTES - WIDEST_TICK.len() - 1
            ),
        ));
    }
    Ok(name)
}

/// The fixed-interval tick starting `start` microseconds after the epoch.
fn tick_of(interval: Duration, start: i64) -> Option<Tick> {
    let end = start.checked_add(clock::micros_rounded_up(interval))?;
    Some(Tick {
        start: clock::from_micros(start)?,
        end: clock::from_micros(end)?,
    })
}

/// A cron expression's times on a time zone's wall clocks, as instants.
///
/// Croner finds the wall-clock times (it is asked in UTC, where no clock
/// jumps); [`instant_of`](CronTimes::instant_of) maps each to its instant,
/// never decreasing as wall-clock time increases, so the ticks are the
/// distinct instants in order.
#[derive(Debug, Clone)]
struct CronTimes {
    expression: String,
    cron: Cron,
    zone: Tz,
}

impl PartialEq for CronTimes {
    fn eq(&self, other: &Self) -> bool {
        (&self.expression, self.zone) == (&other.expression, other.zone)
    }
}

impl Eq for CronTimes {}

impl CronTimes {
    /// The tick starting at `start`, a time of the expression.
    fn tick_starting(&self, start: Timestamp) -> Option<Tick> {
        Some(Tick {
            start,
            end: self.start_after(start)?,
        })
    }

    /// The instant wall-clock time `local` names: the earlier of two in a
    /// repeated hour, the end of the gap for a time the clocks skip.
    fn instant_of(&self, local: NaiveDateTime) -> Option<Timestamp> {
        let found = match self.zone.from_local_datetime(&local) {
            LocalResult::Single(at) => Some(at),
            LocalResult::Ambiguous(earlier, later) => Some(earlier.min(later)),
            LocalResult::None => (1..=LONGEST_GAP_MINUTES).find_map(|minutes| {
                let after = local.checked_add_signed(TimeDelta::minutes(minutes))?;
                self.zone.from_local_datetime(&after).earliest()
            }),
        };
        found.map(|at| at.with_timezone(&Utc))
    }

    /// The zone's offset from UTC at `instant`, in seconds.
    fn offset_at(&self, instant: Timestamp) -> i64 {
        i64::from(
            self.zone
                .offset_from_utc_datetime(&instant.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    }

    /// The expression's next wall-clock time after (or from, `inclusive`)
    /// `local`, or its previous one before (or at) it.
    fn wall_time(
        &self,
        local: NaiveDateTime,
        forward: bool,
        inclusive: bool,
    ) -> Option<NaiveDateTime> {
        // Croner keeps a start's fraction of a second in what it finds; the
        // expression's times are whole minutes, so a start between seconds
        // is moved to the whole second on the side searched.
        let (mut local, mut inclusive) = (local, inclusive);
        let fraction = local.and_utc().timestamp_subsec_nanos();
        if fraction != 0 {
            let whole = local.checked_sub_signed(TimeDelta::nanoseconds(i64::from(fraction)))?;
            local = if forward {
                whole.checked_add_signed(TimeDelta::seconds(1))?
            } else {
                whole
            };
            inclusive = true;
        }
        let from = Utc.from_utc_datetime(&local);
        let found = if forward {
            self.cron.find_next_occurrence(&from, inclusive)
        } else {
            self.cron.find_previous_occurrence(&from, inclusive)
        };
        found.ok().map(|at| at.naive_utc())
    }

    /// The latest instant of the expression at or before `instant`.
    fn start_at_or_before(&self, instant: Timestamp) -> Option<Timestamp> {
        self.nearest_start(instant, false)
    }

    /// The earliest instant of the expression after `instant`.
    fn start_after(&self, instant: Timestamp) -> Option<Timestamp> {
        self.nearest_start(instant, true)
    }

    /// The earliest instant of the expression after `instant` (`forward`)
    /// or the latest at or before it. The search starts from `instant` read
    /// at the smaller offset of it and the day after (forward), or the
    /// larger of it and the day before: no wall-clock time beyond that start
    /// names an instant on the side sought (in the tz database offsets
    /// change days apart, never by more than 24 hours), and the mapping
    /// keeps order, so the first time found that lands on that side is the
    /// answer.
    fn nearest_start(&self, instant: Timestamp, forward: bool) -> Option<Timestamp> {
        let day = TimeDelta::days(1);
        let offset = if forward {
            let day_after = instant.checked_add_signed(day)?;
            self.offset_at(instant).min(self.offset_at(day_after))
        } else {
            let day_before = instant.checked_sub_signed(day)?;
            self.offset_at(instant).max(self.offset_at(day_before))
        };
        let start = instant
            .naive_utc()
            .checked_add_signed(TimeDelta::seconds(offset))?;
        let mut local = self.wall_time(start, forward, true)?;
        loop {
            let at = self.instant_of(local)?;
            if (at > instant) == forward {
                return Some(at);
            }
            local = self.wall_time(local, forward, false)?;
        }
    }
}

/// The store's clock, read under the keeper's store timeout.
async fn store_now(keeper: &Keeper) -> Result<Timestamp, KeeperError> {
    let shared = &keeper.shared;
    Ok(shared
        .bounded("the store's clock", shared.store.now())
        .await?)
}

/// Point reads of the keeper's store, each under its store timeout.
struct Reads<'a>(&'a Keeper);

impl Reads<'_> {
    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>, Error> {
        let shared = &self.0.shared;
        shared.bounded("a read", shared.store.get(id)).await
    }
}

/// The ticks a winner found missing before its own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missed {
    /// These ticks, oldest first, lie between the last tick that fired and
    /// this one and never fired (empty: none was missed).
    Ticks(Vec<Tick>),
    /// No tick fired within the look-back horizon: the schedule's first
    /// firing, or every host was down for longer than the horizon.
    BeyondHorizon,
    /// A read failed while looking back: whether ticks were missed is
    /// unknown.
    Unknown,
}

impl Missed {
    /// The ticks known to have been missed.
    pub fn ticks(&self) -> &[Tick] {
        match self {
            Missed::Ticks(ticks) => ticks,
            Missed::BeyondHorizon | Missed::Unknown => &[],
        }
    }
}

/// What a delivery is handed: the tick, the ticks missed before it, and
/// the run's fence and signals.
#[derive(Clone)]
pub struct Firing {
    guard: RunGuard,
    tick: Tick,
    missed: Missed,
}

impl fmt::Debug for Firing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Firing")
            .field("tick", &self.tick)
            .field("claim", self.claim())
            .field("missed", &self.missed)
            .finish()
    }
}

impl Firing {
    /// The tick being delivered.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// The ticks missed before this one.
    pub fn missed(&self) -> &Missed {
        &self.missed
    }

    /// The run's claim (its id is the tick's run id).
    pub fn claim(&self) -> &Claim {
        self.guard.claim()
    }

    /// The run's fence, for the resources the delivery writes.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// Cancelled the moment the run loses its lease (the delivery is
    /// aborted then too).
    pub fn token(&self) -> CancellationToken {
        self.guard.token()
    }

    /// Whether the run still holds its lease (see [`RunGuard::check`]).
    pub async fn check(&self) -> Result<(), OwnershipLost> {
        self.guard.check().await
    }
}

/// What happened to one tick on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TickOutcome {
    /// This host won the tick and the delivery succeeded; the run is
    /// `Succeeded`.
    Delivered {
        /// The tick.
        tick: Tick,
        /// The run's fence.
        fence: u64,
        /// The ticks missed before it.
        missed: Missed,
    },
    /// This host won the tick and the delivery answered an error (or
    /// panicked); the run is completed `Failed` with it.
    DeliveryFailed {
        /// The tick.
        tick: Tick,
        /// The run's fence.
        fence: u64,
        /// The ticks missed before it.
        missed: Missed,
        /// The delivery's error.
        error: String,
    },
    /// This host won the tick, then lost the run's lease: the delivery was
    /// aborted, or (`delivered`) it had returned but its completion was
    /// refused or unconfirmed. The run is left as the store has it.
    Lost {
        /// The tick.
        tick: Tick,
        /// The run's fence.
        fence: u64,
        /// The ticks missed before it.
        missed: Missed,
        /// Why the lease is gone.
        cause: LossCause,
        /// Whether the delivery had finished.
        delivered: bool,
    },
    /// This host won the tick too late to deliver it ([`LATE`]); the run is
    /// completed `Failed`.
    Late {
        /// The tick.
        tick: Tick,
    },
    /// Another host won the tick.
    Elsewhere {
        /// The tick.
        tick: Tick,
    },
}

impl TickOutcome {
    /// The tick.
    pub fn tick(&self) -> Tick {
        match self {
            TickOutcome::Delivered { tick, .. }
            | TickOutcome::DeliveryFailed { tick, .. }
            | TickOutcome::Lost { tick, .. }
            | TickOutcome::Late { tick }
            | TickOutcome::Elsewhere { tick } => *tick,
        }
    }

    /// What the winner found missing, when this host won and delivered (or
    /// tried to).
    pub fn missed(&self) -> Option<&Missed> {
        match self {
            TickOutcome::Delivered { missed, .. }
            | TickOutcome::DeliveryFailed { missed, .. }
            | TickOutcome::Lost { missed, .. } => Some(missed),
            TickOutcome::Late { .. } | TickOutcome::Elsewhere { .. } => None,
        }
    }

    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            TickOutcome::Delivered { .. } => "delivered",
            TickOutcome::DeliveryFailed { .. } => "delivery_failed",
            TickOutcome::Lost { .. } => "lost",
            TickOutcome::Late { .. } => "late",
            TickOutcome::Elsewhere { .. } => "elsewhere",
        }
    }
}

type Deliver = Arc<dyn Fn(Firing) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;
type OutcomeHook = Arc<dyn Fn(Result<TickOutcome, KeeperError>) + Send + Sync>;

/// Builds a [`Ticker`]; see [`Ticker::builder`].
pub struct TickerBuilder {
    keeper: Arc<Keeper>,
    schedule: Schedule,
    on_outcome: Option<OutcomeHook>,
}

impl TickerBuilder {
    /// Called with every tick's outcome on this host (or the error that
    /// kept it from being decided), in the ticker's task (keep it short; a
    /// panic in it is caught and logged).
    pub fn on_outcome<F>(mut self, hook: F) -> Self
    where
        F: Fn(Result<TickOutcome, KeeperError>) + Send + Sync + 'static,
    {
        self.on_outcome = Some(Arc::new(hook));
        self
    }

    /// Starts ticking: at the start of every tick (by the store's clock),
    /// and at once for the tick in progress, fires it
    /// ([`Schedule::fire_due`]) with `deliver`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a keeper without a ttl (a delivery
    /// is a lease); [`ErrorKind::Config`] outside a tokio runtime.
    pub fn start<F, Fut, E>(self, deliver: F) -> Result<Ticker, Error>
    where
        F: Fn(Firing) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + 'static,
    {
        let Some(retry) = self.keeper.config().effective_renew_interval() else {
            return Err(Error::invalid_input(
                "keeper",
                "a ticker needs a keeper with a ttl: each delivery is a lease",
            ));
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::new(
                ErrorKind::Config,
                "a Ticker must be started inside a tokio runtime",
            ));
        }
        let deliver: Deliver = Arc::new(move |firing| {
            let delivery = deliver(firing);
            Box::pin(async move { delivery.await.map_err(|error| error.to_string()) })
        });
        let stop = Stop::default();
        let name = self.schedule.name.clone();
        let ticking = Ticking {
            keeper: self.keeper,
            schedule: Arc::new(self.schedule),
            deliver,
            on_outcome: self.on_outcome,
            retry,
            stop: stop.clone(),
        };
        Ok(Ticker {
            name,
            stop,
            task: Mutex::new(Some(tokio::spawn(ticking.run()))),
        })
    }
}

/// Fires a [`Schedule`]'s ticks on this host, for as long as it runs: start
/// one per host, and every tick is delivered once among them. Deliveries run
/// concurrently, so one that outlasts the interval overlaps the next tick's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use tenure_backend_memory::MemoryStore;
/// use tenure_keeper::{Keeper, KeeperConfig, Schedule, Ticker, TickOutcome};
/// use tokio::sync::mpsc;
/// use tokio::time::Instant;
///
/// let store = Arc::new(MemoryStore::new());
/// let keeper = Arc::new(Keeper::builder(store, KeeperConfig::with_ttl(Duration::from_secs(10))).start()?);
/// let (outcomes, mut seen) = mpsc::unbounded_channel();
/// let ticker = Ticker::builder(keeper.clone(), Schedule::every("cleanup", Duration::from_secs(60))?)
///     .on_outcome(move |outcome| {
///         let _ = outcomes.send(outcome);
///     })
///     .start(|firing| async move {
///         // ... the tick's work, writing under firing.fence() ...
///         Ok::<(), std::io::Error>(())
///     })?;
/// let first = seen.recv().await.expect("the tick in progress fires at once")?;
/// assert!(matches!(first, TickOutcome::Delivered { .. }));
/// let report = ticker.shutdown(Instant::now() + Duration::from_secs(5)).await;
/// assert!(report.drained);
/// keeper.shutdown(Instant::now() + Duration::from_secs(5)).await;
/// # Ok(())
/// # }
/// ```
pub struct Ticker {
    name: String,
    stop: Stop,
    task: Mutex<Option<JoinHandle<TickerReport>>>,
}

impl fmt::Debug for Ticker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticker")
            .field("schedule", &self.name)
            .finish_non_exhaustive()
    }
}

/// What [`Ticker::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickerReport {
    /// Every delivery in progress finished before the deadline.
    pub drained: bool,
    /// Ticks still being fired at the deadline, stopped (their runs are
    /// left to expire and are recovered as orphans).
    pub stopped: Vec<Tick>,
}

impl Ticker {
    /// A ticker for `schedule` on `keeper`; configure it, then
    /// [`start`](TickerBuilder::start) it.
    pub fn builder(keeper: Arc<Keeper>, schedule: Schedule) -> TickerBuilder {
        TickerBuilder {
            keeper,
            schedule,
            on_outcome: None,
        }
    }

    /// [`shutdown`](Self::shutdown) with a deadline `grace` from now: for
    /// a ticker shut down on its own (with its keeper after it, use one
    /// shared deadline).
    pub async fn shutdown_within(&self, grace: Duration) -> TickerReport {
        self.shutdown(Instant::now() + grace).await
    }

    /// Stops firing new ticks; deliveries in progress may finish until
    /// `deadline`, then are aborted (their runs left to expire). Shut the
    /// ticker down before its keeper.
    pub async fn shutdown(&self, deadline: Instant) -> TickerReport {
        self.stop.request(deadline);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(task) = task else {
            return TickerReport::default();
        };
        task.await.unwrap_or_else(|error| {
            tracing::error!(schedule = %self.name, %error, "the ticker task failed");
            TickerReport::default()
        })
    }
}

impl Drop for Ticker {
    /// Dropping a ticker without [`shutdown`](Ticker::shutdown) aborts it
    /// and its deliveries; their runs are left to expire.
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

type Fired = (Tick, Result<TickOutcome, KeeperError>);

/// The ticker task's state.
struct Ticking {
    keeper: Arc<Keeper>,
    schedule: Arc<Schedule>,
    deliver: Deliver,
    on_outcome: Option<OutcomeHook>,
    /// The wait before trying again after the store could not answer.
    retry: Duration,
    stop: Stop,
}

/// The firings in progress, by task.
#[derive(Default)]
struct InProgress {
    tasks: JoinSet<Fired>,
    ticks: HashMap<tokio::task::Id, Tick>,
}

impl Ticking {
    async fn run(self) -> TickerReport {
        let mut firing = InProgress::default();
        let mut last: Option<Tick> = None;
        // The tick whose firing the store could not decide, and when to
        // try it again; a later tick is fired when due regardless.
        let mut retry: Option<(Tick, Instant)> = None;
        loop {
            let wait = match store_now(&self.keeper).await {
                Ok(now) => {
                    let tick = self.schedule.tick_at(now);
                    let retry_due = match retry {
                        Some((failed, at)) if failed == tick => at <= Instant::now(),
                        _ => true,
                    };
                    if last != Some(tick) && retry_due {
                        last = Some(tick);
                        retry = None;
                        self.spawn(&mut firing, tick);
                    }
                    let to_next = clock::until(now, tick.end);
                    match retry {
                        Some((failed, at)) if failed == tick => {
                            to_next.min(at.saturating_duration_since(Instant::now()))
                        }
                        _ => to_next,
                    }
                }
                Err(error) => {
                    tracing::warn!(schedule = %self.schedule.name, %error, "could not read the store's clock; trying again");
                    self.retry
                }
            };
            tokio::select! {
                _ = self.stop.token.cancelled() => break,
                Some(joined) = firing.tasks.join_next_with_id() => {
                    match self.reaped(&mut firing, joined) {
                        Reaped::Done => {}
                        Reaped::Retry(tick) => {
                            if last == Some(tick) {
                                last = None;
                                retry = Some((tick, Instant::now() + self.retry));
                            }
                        }
                        Reaped::Halt => break,
                    }
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let drained = tokio::time::timeout_at(self.stop.deadline(), async {
            while let Some(joined) = firing.tasks.join_next_with_id().await {
                self.reaped(&mut firing, joined);
            }
        })
        .await
        .is_ok();
        let mut stopped: Vec<Tick> = firing.ticks.values().copied().collect();
        stopped.sort();
        firing.tasks.shutdown().await;
        TickerReport { drained, stopped }
    }

    fn spawn(&self, firing: &mut InProgress, tick: Tick) {
        let keeper = Arc::clone(&self.keeper);
        let schedule = Arc::clone(&self.schedule);
        let deliver = Arc::clone(&self.deliver);
        let task = firing.tasks.spawn(async move {
            let outcome = schedule.fire(&keeper, tick, |run| deliver(run)).await;
            (tick, outcome)
        });
        firing.ticks.insert(task.id(), tick);
    }

    /// Reports one finished firing; says whether its tick is worth another
    /// try (the store could not decide it) or the keeper takes no leases.
    fn reaped(
        &self,
        firing: &mut InProgress,
        joined: Result<(tokio::task::Id, Fired), JoinError>,
    ) -> Reaped {
        let (tick, outcome) = match joined {
            Ok((id, fired)) => {
                firing.ticks.remove(&id);
                fired
            }
            Err(error) => {
                firing.ticks.remove(&error.id());
                tracing::error!(schedule = %self.schedule.name, %error, "a firing task failed");
                return Reaped::Done;
            }
        };
        let next = match &outcome {
            Ok(fired) => {
                tracing::debug!(schedule = %self.schedule.name, %tick, outcome = fired.label(), "tick fired");
                Reaped::Done
            }
            Err(KeeperError::Store(error)) => {
                tracing::warn!(schedule = %self.schedule.name, %tick, %error, "the tick could not be fired; trying again");
                Reaped::Retry(tick)
            }
            Err(error) => {
                tracing::warn!(schedule = %self.schedule.name, %tick, %error, "the keeper takes no leases; the ticker stops");
                Reaped::Halt
            }
        };
        if let Some(hook) = &self.on_outcome {
            if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(|| hook(outcome))) {
                tracing::error!(schedule = %self.schedule.name, panic = %super::health::panic_message(&*payload), "on_outcome panicked");
            }
        }
        next
    }
}

/// What a finished firing means for the ticker.
enum Reaped {
    Done,
    Retry(Tick),
    Halt,
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn at(text: &str) -> Timestamp {
        chrono::DateTime::parse_from_rfc3339(text)
            .expect("an RFC 3339 instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn ticks_are_aligned_to_the_epoch() {
        let hourly = Schedule::every("report", Duration::from_secs(3600)).unwrap();
        let tick = hourly.tick_at(at("2026-11-29T10:59:59.999999Z"));
        assert_eq!(tick.start(), at("2026-11-29T10:00:00Z"));
        assert_eq!(tick.end(), at("2026-11-29T11:00:00Z"));
        assert_eq!(
            hourly.tick_at(tick.end()).start(),
            tick.end(),
            "ends are exclusive"
        );
        assert!(tick.contains(tick.start()) && !tick.contains(tick.end()));
        assert_eq!(hourly.run_id(tick), "report@2026-11-29T10:00:00Z");

        let fast = Schedule::every("beat", Duration::from_millis(250)).unwrap();
        let tick = fast.tick_at(at("2026-11-29T10:00:00.600Z"));
        assert_eq!(fast.run_id(tick), "beat@2026-11-29T10:00:00.500Z");
        let before_epoch = fast.tick_at(Utc.timestamp_micros(-1).unwrap());
        assert_eq!(
            before_epoch.start(),
            Utc.timestamp_micros(-250_000).unwrap()
        );
    }

    #[test]
    fn neighbouring_ticks_are_one_interval_apart() {
        let schedule = Schedule::every("s", Duration::from_secs(90)).unwrap();
        let tick = schedule.tick_at(at("2026-11-29T10:00:00Z"));
        let next = schedule.tick_after(tick).unwrap();
        assert_eq!(next.start(), tick.end());
        assert_eq!(schedule.tick_before(next), Some(tick));
        let before = schedule.tick_before(tick).unwrap();
        assert_eq!(before.end(), tick.start());
        assert_eq!(
            schedule.tick_at(before.end() - TimeDelta::microseconds(1)),
            before
        );
    }

    /// The ticks of `schedule` from the one at `from` on, as run ids.
    fn run_ids(schedule: &Schedule, from: &str, count: usize) -> Vec<String> {
        std::iter::successors(Some(schedule.tick_at(at(from))), |tick| {
            schedule.tick_after(*tick)
        })
        .take(count)
        .map(|tick| schedule.run_id(tick))
        .collect()
    }

    #[test]
    fn cron_ticks_follow_the_zones_wall_clocks() {
        let weekdays = Schedule::cron("d", "0 9 * * MON-FRI", "Europe/Berlin").unwrap();
        // Friday 4 December 2026, 09:00 in Berlin (UTC+1), then Monday.
        assert_eq!(
            run_ids(&weekdays, "2026-12-04T12:00:00Z", 2),
            ["d@2026-12-04T08:00:00Z", "d@2026-12-07T08:00:00Z"]
        );
        let tick = weekdays.tick_at(at("2026-12-05T23:59:59Z"));
        assert_eq!(
            tick.start(),
            at("2026-12-04T08:00:00Z"),
            "the weekend is inside Friday's tick"
        );
        assert_eq!(
            weekdays.tick_at(tick.start()),
            tick,
            "a tick starts where its time is"
        );
        assert_eq!(
            weekdays
                .tick_at(tick.start() - TimeDelta::microseconds(1))
                .end(),
            tick.start()
        );
        assert_eq!(
            weekdays.tick_before(tick).unwrap().start(),
            at("2026-12-03T08:00:00Z")
        );
        assert_eq!(weekdays.interval(), None);
        assert_eq!(
            weekdays.cron_expression(),
            Some(("0 9 * * MON-FRI", "Europe/Berlin"))
        );

        // The ends of the representable range answer a tick, never a panic.
        for edge in [Timestamp::MIN_UTC, Timestamp::MAX_UTC] {
            let tick = weekdays.tick_at(edge);
            let _ = (weekdays.tick_after(tick), weekdays.tick_before(tick));
        }

        let nickname = Schedule::cron("n", "@daily", "UTC").unwrap();
        assert_eq!(
            run_ids(&nickname, "2026-12-04T12:00:00Z", 1),
            ["n@2026-12-04T00:00:00Z"]
        );
        // 29 February: four years apart.
        let leap = Schedule::cron("l", "0 0 29 2 *", "UTC").unwrap();
        assert_eq!(
            run_ids(&leap, "2026-12-04T00:00:00Z", 2),
            ["l@2024-02-29T00:00:00Z", "l@2028-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn a_skipped_cron_time_ticks_at_the_end_of_the_gap() {
        // New York, 14 March 2027: clocks go from 02:00 EST to 03:00 EDT.
        let nightly = Schedule::cron("n", "30 2 * * *", "America/New_York").unwrap();
        assert_eq!(
            run_ids(&nightly, "2027-03-13T12:00:00Z", 3),
            [
                "n@2027-03-13T07:30:00Z", // 02:30 EST
                "n@2027-03-14T07:00:00Z", // 03:00 EDT, the gap's end
                "n@2027-03-15T06:30:00Z", // 02:30 EDT
            ]
        );
        // 02:00, 02:30 and 03:00 land on one instant: one tick.
        let both = Schedule::cron("b", "0,30 2,3 * * *", "America/New_York").unwrap();
        assert_eq!(
            run_ids(&both, "2027-03-14T06:59:00Z", 4),
            [
                "b@2027-03-13T08:30:00Z", // 03:30 EST on the 13th
                "b@2027-03-14T07:00:00Z", // 02:00, 02:30 and 03:00 EDT
                "b@2027-03-14T07:30:00Z", // 03:30 EDT
                "b@2027-03-15T06:00:00Z", // 02:00 EDT on the 15th
            ]
        );
    }

    #[test]
    fn zones_east_of_utc_half_hour_changes_and_skipped_days() {
        // Berlin, 28 March 2027: 02:00 CET → 03:00 CEST; 31 October 2027:
        // 03:00 CEST → 02:00 CET.
        let berlin = Schedule::cron("b", "30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            run_ids(&berlin, "2027-03-27T12:00:00Z", 3),
            [
                "b@2027-03-27T01:30:00Z", // 02:30 CET
                "b@2027-03-28T01:00:00Z", // 03:00 CEST, the gap's end
                "b@2027-03-29T00:30:00Z", // 02:30 CEST
            ]
        );
        assert_eq!(
            run_ids(&berlin, "2027-10-31T00:30:00Z", 2),
            [
                "b@2027-10-31T00:30:00Z", // 02:30 CEST, not again at 02:30 CET
                "b@2027-11-01T01:30:00Z", // 02:30 CET
            ]
        );
        // Lord Howe moves its clocks by half an hour: 02:00 → 02:30 on 3
        // October 2027 (UTC+10:30 → +11), 02:00 → 01:30 on 4 April 2027.
        let howe = Schedule::cron("h", "15 2 * * *", "Australia/Lord_Howe").unwrap();
        assert_eq!(
            run_ids(&howe, "2027-10-02T15:30:00Z", 2),
            ["h@2027-10-02T15:30:00Z", "h@2027-10-03T15:15:00Z"] // 02:30 (+11), 02:15 (+11)
        );
        let early = Schedule::cron("e", "45 1 * * *", "Australia/Lord_Howe").unwrap();
        assert_eq!(
            run_ids(&early, "2027-04-03T14:45:00Z", 2),
            ["e@2027-04-03T14:45:00Z", "e@2027-04-04T15:15:00Z"] // 01:45 (+11) once, 01:45 (+10:30)
        );
        // Apia skipped 30 December 2011 (UTC-10 → UTC+14 at midnight).
        let apia = Schedule::cron("a", "0 12 * * *", "Pacific/Apia").unwrap();
        assert_eq!(
            run_ids(&apia, "2011-12-29T23:00:00Z", 3),
            [
                "a@2011-12-29T22:00:00Z", // 12:00 on the 29th (-10)
                "a@2011-12-30T10:00:00Z", // the 30th's noon: the gap's end, 00:00 on the 31st
                "a@2011-12-30T22:00:00Z", // 12:00 on the 31st (+14)
            ]
        );
    }

    #[test]
    fn a_repeated_cron_time_ticks_once_at_its_first_occurrence() {
        // New York, 7 November 2027: clocks go from 02:00 EDT back to 01:00 EST.
        let nightly = Schedule::cron("n", "30 1 * * *", "America/New_York").unwrap();
        assert_eq!(
            run_ids(&nightly, "2027-11-06T12:00:00Z", 3),
            [
                "n@2027-11-06T05:30:00Z", // 01:30 EDT
                "n@2027-11-07T05:30:00Z", // 01:30 EDT, not again at 01:30 EST
                "n@2027-11-08T06:30:00Z", // 01:30 EST
            ]
        );
        let second_pass = at("2027-11-07T06:45:00Z"); // 01:45 EST
        assert_eq!(
            nightly.tick_at(second_pass).start(),
            at("2027-11-07T05:30:00Z")
        );

        let half_hourly = Schedule::cron("h", "*/30 * * * *", "America/New_York").unwrap();
        assert_eq!(
            run_ids(&half_hourly, "2027-11-07T05:00:00Z", 4),
            [
                "h@2027-11-07T05:00:00Z", // 01:00 EDT
                "h@2027-11-07T05:30:00Z", // 01:30 EDT, until 02:00 EST
                "h@2027-11-07T07:00:00Z", // 02:00 EST
                "h@2027-11-07T07:30:00Z",
            ]
        );
        let tick = half_hourly.tick_at(at("2027-11-07T06:15:00Z")); // 01:15 EST
        assert_eq!(
            (tick.start(), tick.end()),
            (at("2027-11-07T05:30:00Z"), at("2027-11-07T07:00:00Z"))
        );
        assert_eq!(
            half_hourly.tick_before(half_hourly.tick_after(tick).unwrap()),
            Some(tick)
        );
    }

    #[test]
    fn bad_schedules_are_refused() {
        let refused = |result: Result<Schedule, Error>, field: &str| {
            let error = result.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput);
            assert_eq!(error.field(), Some(field));
        };
        let second = Duration::from_secs(1);
        refused(Schedule::every("", second), "name");
        refused(Schedule::every("a\nb", second), "name");
        refused(
            Schedule::every("x".repeat(validate::MAX_NAME_BYTES - 20), second),
            "name",
        );
        refused(Schedule::every("s", Duration::from_micros(999)), "interval");
        refused(
            Schedule::every("s", Duration::from_nanos(1_000_000_500)),
            "interval",
        );
        refused(Schedule::every("s", MAX_INTERVAL + second), "interval");
        refused(Schedule::cron("", "* * * * *", "UTC"), "name");
        for bad in [
            "",
            "* * * *",
            "0 * * * * *",
            "61 * * * *",
            "every day",
            "0 0 30 2 *",
        ] {
            refused(Schedule::cron("s", bad, "UTC"), "cron");
        }
        refused(
            Schedule::cron("s", "* * * * *", "Mars/Olympus"),
            "time_zone",
        );
        refused(Schedule::cron("s", "* * * * *", ""), "time_zone");
        refused(
            Schedule::every("s", second).unwrap().lookback(0),
            "lookback",
        );
        refused(
            Schedule::every("s", second)
                .unwrap()
                .lookback(MAX_LOOKBACK + 1),
            "lookback",
        );
        let longest = "x".repeat(validate::MAX_NAME_BYTES - WIDEST_TICK.len() - 1);
        let schedule = Schedule::every(longest, MIN_INTERVAL).unwrap();
        let tick = schedule.tick_at(at("9999-12-31T23:59:59.999999Z"));
        validate::lease_id(&schedule.run_id(tick)).expect("the longest run id is valid");
    }
}
