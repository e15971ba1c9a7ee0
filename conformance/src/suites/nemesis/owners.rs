//! Owners in child processes, paused and killed: a [`Keeper`] in another
//! process of the same test binary holds a lease and writes through the
//! gate; the parent stops it with `SIGSTOP` (or kills it with `SIGKILL`),
//! takes the lease over once the store judges it lapsed, writes with the
//! new fence, and (paused) resumes it. A paused owner records its calls
//! into a history of its own and hands it over at the end, and the parent
//! checks both together; a killed owner's history dies with it, so there
//! the parent checks its own, and that no takeover lands before the
//! deadline the owner last said it had confirmed.
//!
//! The protocol runs over the child's stdin and stdout, one line a step,
//! every child line prefixed with [`MARK`]: the parent says `own ID SCOPE`,
//! the child answers `holding FENCE DEADLINE` once admitted and written,
//! writes every [`WRITE_EVERY`] until its keeper cancels the run, then says
//! `lost NANOS` (the monotonic instant it saw the loss); `report` makes it
//! print every entry it recorded (`entry JSON`, then `reported`).

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tenure_keeper::Keeper;
use tenure_keeper::{AdmitOutcome, KeeperConfig};
use tenure_lease_core::layer::LayerExt as _;
use tenure_lease_core::{
    FenceCheck, FenceStore, LeaseStore, NotTakenReason, Takeover, TakeoverRequest,
};

use super::workload::{GRACE, TTL};
use super::{Store, OWNER_VAR};
use crate::harness::{guarded_within, unavailable, with_cleanup};
use crate::harness::{CaseOutcome, Factory, Failure};
use crate::history::{check, monotonic_nanos, Entry, History};
use crate::suites::process::SharedStore;
use crate::suites::{report_note, unsupported};

/// Prefix of every line a child prints for its parent.
const MARK: &str = "tenure-nemesis ";
/// The environment variable naming the shared store to the child.
const ADDRESS_VAR: &str = "TENURE_NEMESIS_ADDRESS";
/// How often an owner writes through the gate.
const WRITE_EVERY: Duration = Duration::from_millis(15);
/// Bound on one step of the protocol, or on the store judging a lease
/// lapsed: far above any healthy wait, so only a hang fails.
const STEP_BOUND: Duration = Duration::from_secs(30);
/// How long the rival asks for a paused owner's lease before it takes the
/// owner to hold a lock the store needs, and resumes it.
const PAUSED_TAKEOVER_BOUND: Duration = Duration::from_secs(5);
/// Added to the scenario's bound per owner: far above a healthy round.
const PER_OWNER_BOUND: Duration = Duration::from_secs(10);
/// Admissions an owner tries before it gives up on an `Err`.
const ADMIT_TRIES: usize = 5;
/// How often the rival asks for the lapsed lease.
const TAKEOVER_POLL: Duration = Duration::from_millis(5);
/// Owners paused or killed per scenario unless [`OWNERS_VAR`] says.
const DEFAULT_OWNERS: usize = 5;
/// The environment variable setting how many owners each scenario pauses
/// or kills (the long form: 1,000 and more).
pub const OWNERS_VAR: &str = "TENURE_NEMESIS_OWNERS";

fn owners() -> usize {
    std::env::var(OWNERS_VAR)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(DEFAULT_OWNERS)
        .max(1)
}

/// What to do to the owner once it holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blow {
    /// `SIGSTOP`, then `SIGCONT` after the rival has written.
    Pause,
    /// `SIGKILL`.
    Kill,
}

/// Percentiles of a set of durations, for the scenario's line.
fn spread(mut samples: Vec<Duration>) -> String {
    if samples.is_empty() {
        return "none".to_owned();
    }
    samples.sort();
    let at = |fraction: f64| {
        let index = ((samples.len() - 1) as f64 * fraction).round() as usize;
        samples[index.min(samples.len() - 1)]
    };
    format!(
        "p50 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        samples[samples.len() - 1]
    )
}

/// The parent's side of both owner scenarios.
pub(crate) async fn owners_scenario<F>(
    factory: &F,
    test: &str,
    name: &str,
    blow: Blow,
) -> CaseOutcome
where
    F: Factory,
    F::Store: Store,
{
    let Some(processes) = factory.processes() else {
        return unsupported("store other processes can open", "processes");
    };
    if let Some(reason) = factory.unavailable_reason() {
        return unavailable(reason);
    }
    let SharedStore { store, address } = match processes.create_shared().await {
        Ok(shared) => shared,
        Err(error) => {
            return CaseOutcome::Failed(format!("factory could not create a shared store: {error}"))
        }
    };
    let store = Arc::new(store);
    let bound = crate::harness::CASE_TIMEOUT
        + PER_OWNER_BOUND * u32::try_from(owners()).unwrap_or(u32::MAX);
    let outcome = guarded_within(
        bound,
        play_rounds(Arc::clone(&store), test.to_owned(), address, name, blow),
    )
    .await;
    with_cleanup(outcome, factory.teardown(&store).await)
}

/// A child process of this test, speaking the protocol.
struct Owner {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Owner {
    fn spawn(test: &str, address: &str, name: &str) -> Result<Owner, Failure> {
        let mut child = Command::new(std::env::current_exe().map_err(failure)?)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(OWNER_VAR, name)
            .env(ADDRESS_VAR, address)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(failure)?;
        let stdin = child.stdin.take().ok_or_else(|| failure("no stdin"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| failure("no stdout"))?);
        Ok(Owner {
            child,
            stdin,
            stdout,
        })
    }

    fn say(&mut self, line: &str) -> Result<(), Failure> {
        writeln!(self.stdin, "{line}").map_err(failure)
    }

    /// The next line of ours starting with `word`, without it.
    fn expect(&mut self, word: &str) -> Result<String, Failure> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).map_err(failure)? == 0 {
                return Err(Failure(format!(
                    "the owner exited while the parent waited for {word:?}"
                )));
            }
            if let Some((_, ours)) = line.trim_end().split_once(MARK) {
                return match ours.split_once(' ').unwrap_or((ours, "")) {
                    (said, rest) if said == word => Ok(rest.to_owned()),
                    (said, rest) => {
                        Err(Failure(format!("the owner said {said} {rest}, not {word}")))
                    }
                };
            }
        }
    }

    fn signal(&self, signal: &str) -> Result<(), Failure> {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .map_err(failure)?;
        if status.success() {
            Ok(())
        } else {
            Err(Failure(format!("kill {signal} failed: {status}")))
        }
    }

    /// Everything the owner recorded.
    fn report(&mut self) -> Result<Vec<Entry>, Failure> {
        self.say("report")?;
        let mut entries = Vec::new();
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).map_err(failure)? == 0 {
                return Err(failure("the owner exited mid-report"));
            }
            let Some((_, ours)) = line.trim_end().split_once(MARK) else {
                continue;
            };
            match ours.split_once(' ') {
                Some(("entry", json)) => entries.push(serde_json::from_str(json).map_err(failure)?),
                _ if ours == "reported" => return Ok(entries),
                _ => return Err(Failure(format!("the owner said {ours} mid-report"))),
            }
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn failure(error: impl std::fmt::Display) -> Failure {
    Failure(format!("owner process: {error}"))
}

/// One owner per round (a fresh process for each killed one), the rival
/// taking over in this process; then the whole history is checked.
async fn play_rounds<S: Store>(
    store: Arc<S>,
    test: String,
    address: String,
    name: &str,
    blow: Blow,
) -> Result<(), Failure> {
    let history = History::new();
    let rival = Arc::clone(&store).layer(history.client("rival"));
    let rounds = owners();
    let mut owner: Option<Owner> = None;
    let (mut noticed, mut taken_after_death, mut refused) = (Vec::new(), Vec::new(), 0usize);
    let mut pauses_holding_a_lock = 0usize;
    for round in 0..rounds {
        let current = match owner.take() {
            Some(owner) => owner,
            None => {
                let spawned = Owner::spawn(&test, &address, &format!("owner-{round}"))?;
                blocking(spawned, |owner| owner.expect("ready")).await?.0
            }
        };
        let (id, scope) = (format!("{name}-{round}"), format!("{name}-scope-{round}"));
        let own = format!("own {id} {scope}");
        let (current, holding) = blocking(current, move |owner| {
            owner.say(&own)?;
            owner.expect("holding")
        })
        .await?;
        let (fence, deadline) = holding
            .split_once(' ')
            .and_then(|(fence, deadline)| {
                Some((fence.parse::<u64>().ok()?, deadline.parse::<u64>().ok()?))
            })
            .ok_or_else(|| Failure(format!("bad holding line {holding:?}")))?;
        let struck = monotonic_nanos();
        match blow {
            Blow::Pause => current.signal("-STOP")?,
            Blow::Kill => current.signal("-KILL")?,
        }
        let mut resumed = None;
        let taken = match take_over(&rival, &id, PAUSED_TAKEOVER_BOUND).await? {
            Some(taken) => taken,
            None => {
                // The owner was stopped holding something the store needs
                // (SQLite's and the file store's write lock): nobody can take
                // over until it runs again, and then its keeper, past its
                // deadline, must stop and let the lease lapse.
                if blow == Blow::Pause {
                    resumed = Some(monotonic_nanos());
                    current.signal("-CONT")?;
                    pauses_holding_a_lock += 1;
                }
                take_over(&rival, &id, STEP_BOUND).await?.ok_or_else(|| {
                    Failure(format!("the store never let the rival take {id} over"))
                })?
            }
        };
        let taken_at = monotonic_nanos();
        if taken_at < deadline {
            return Err(Failure(format!(
                "{id} was taken over {} µs before its owner's confirmed deadline",
                (deadline - taken_at) / 1_000
            )));
        }
        rival_writes(&rival, &scope, taken.fence).await?;
        if taken.fence <= fence {
            return Err(Failure(format!(
                "the takeover's fence {} is not above the owner's {fence}",
                taken.fence
            )));
        }
        let rival_wrote = monotonic_nanos();
        match blow {
            Blow::Kill => {
                taken_after_death.push(Duration::from_nanos(rival_wrote.saturating_sub(struck)));
                drop(current);
            }
            Blow::Pause => {
                let resumed = match resumed {
                    Some(resumed) => resumed,
                    None => {
                        let resumed = monotonic_nanos();
                        current.signal("-CONT")?;
                        resumed
                    }
                };
                let (current, lost) = blocking(current, |owner| owner.expect("lost")).await?;
                let lost_at: u64 = lost.trim().parse().map_err(failure)?;
                noticed.push(Duration::from_nanos(lost_at.saturating_sub(resumed)));
                owner = Some(current);
            }
        }
        let _ = rival
            .transition(
                &tenure_lease_core::Claim {
                    id: id.clone(),
                    owner: "rival".to_owned(),
                    fence: taken.fence,
                },
                &tenure_lease_core::StatusChange::succeeded(),
            )
            .await;
    }
    if let Some(current) = owner.take() {
        let (_, entries) = blocking(current, Owner::report).await?;
        refused = entries
            .iter()
            .filter(|entry| matches!(entry.reply, crate::history::Reply::Stale { .. }))
            .count();
        history.extend(entries);
    }
    let verdict = check(&history.entries());
    let timing = match blow {
        Blow::Pause => format!(
            "loss noticed after resume: {}; paused holding the store's lock (taken over only \
             after the resume): {pauses_holding_a_lock}",
            spread(noticed)
        ),
        Blow::Kill => format!(
            "death to the successor's first accepted write: {} (ttl {TTL:?} + grace {GRACE:?} + one beat {:?})",
            spread(taken_after_death),
            TTL / 3
        ),
    };
    report_note(
        name,
        &format!(
            "{rounds} owners; {} calls, {} unknown; owner writes refused after the takeover {refused}; \
             {timing}; violations: {}",
            verdict.calls,
            verdict.unknown,
            verdict.counts()
        ),
    );
    if verdict.is_clean() {
        Ok(())
    } else {
        Err(Failure(format!(
            "the history breaks the contract: {verdict}"
        )))
    }
}

/// Runs one blocking protocol step on the owner off the runtime's threads.
async fn blocking<T: Send + 'static>(
    mut owner: Owner,
    step: impl FnOnce(&mut Owner) -> Result<T, Failure> + Send + 'static,
) -> Result<(Owner, T), Failure> {
    let pid = owner.child.id().to_string();
    let bounded = tokio::time::timeout(
        STEP_BOUND,
        tokio::task::spawn_blocking(move || step(&mut owner).map(|answer| (owner, answer))),
    );
    match bounded.await {
        Ok(joined) => joined.map_err(failure)?,
        Err(_) => {
            // Killed, its pipe closes: the step stuck reading it ends, and
            // no stopped child outlives the scenario.
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            Err(Failure(format!(
                "the owner did not answer within {STEP_BOUND:?}"
            )))
        }
    }
}

/// Asks for the lease until the store judges it lapsed and hands it over,
/// for at most `bound`; `None` when it did not within it. Each attempt is
/// bounded too (a store may wait on a lock the paused owner holds); an
/// attempt given up may still be applied later, so after any answer but
/// `Taken` the rival reads the record to see whether it holds it already.
async fn take_over<R: LeaseStore>(
    rival: &R,
    id: &str,
    bound: Duration,
) -> Result<Option<tenure_lease_core::LeaseRecord>, Failure> {
    let request = TakeoverRequest::adopt(id, "rival", Some(TTL)).grace(GRACE);
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, rival.claim_for_takeover(&request)).await {
            Ok(Ok(Takeover::Taken(record))) => return Ok(Some(record)),
            Ok(Ok(Takeover::NotTaken(NotTakenReason::LeaseValid { .. })) | Err(_)) | Err(_) => {}
            Ok(Ok(other)) => {
                return Err(Failure(format!("the lapsed lease {id} answered {other:?}")))
            }
        }
        if let Ok(Ok(Some(record))) = tokio::time::timeout_at(deadline, rival.get(id)).await {
            if record.owner.as_deref() == Some("rival") {
                return Ok(Some(record));
            }
        }
        tokio::time::sleep(TAKEOVER_POLL).await;
    }
    Ok(None)
}

/// Writes through the gate as the rival until the gate answers; a refusal
/// fails the scenario.
async fn rival_writes<R: FenceStore>(rival: &R, scope: &str, fence: u64) -> Result<(), Failure> {
    let deadline = tokio::time::Instant::now() + STEP_BOUND;
    loop {
        match tokio::time::timeout_at(deadline, rival.check_fence(scope, fence)).await {
            Ok(Ok(FenceCheck::Accepted)) => return Ok(()),
            Ok(Ok(refused)) => {
                return Err(Failure(format!(
                    "the rival's write with fence {fence} was refused: {refused:?}"
                )))
            }
            Ok(Err(_)) => tokio::time::sleep(TAKEOVER_POLL).await,
            Err(_) => {
                return Err(Failure(format!(
                    "the rival's write with fence {fence} got no answer within {STEP_BOUND:?}"
                )))
            }
        }
    }
}

/// The child's side: opens the shared store, holds what the parent asks
/// with a keeper, writes until the keeper says the lease is lost.
pub(crate) fn play_owner<F>(factory: &F, name: &str)
where
    F: Factory,
    F::Store: Store,
{
    let processes = factory
        .processes()
        .expect("an owner runs only for a factory offering processes");
    let address = std::env::var(ADDRESS_VAR).expect("the parent names the shared store");
    let runtime = super::runtime();
    let store = runtime
        .block_on(processes.open_shared(&address))
        .unwrap_or_else(|error| panic!("{name} could not open the shared store: {error}"));
    let history = History::new();
    let store = Arc::new(Arc::new(store).layer(history.client(name)));
    let (lines, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    println!("{MARK}ready");
    runtime.block_on(async move {
        // Store calls may take what a loaded server needs (renewals stay
        // bounded by the confirmed deadline): an admission timed out at
        // the default bound (the 200 ms ttl) would be retried into its own
        // record (seen in CI on PostgreSQL).
        let config = KeeperConfig::with_ttl(TTL)
            .grace(GRACE)
            .store_timeout(STEP_BOUND)
            .auto_reconcile(false)
            .worker_id(name);
        let keeper = Keeper::builder(Arc::clone(&store) as Arc<dyn LeaseStore>, config)
            .start()
            .unwrap_or_else(|error| panic!("{name} could not start a keeper: {error}"));
        while let Some(command) = commands.recv().await {
            let words: Vec<&str> = command.split(' ').collect();
            match words.as_slice() {
                ["own", id, scope] => hold_and_write(&keeper, store.as_ref(), id, scope).await,
                ["report"] => {
                    for entry in history.entries() {
                        let json = serde_json::to_string(&entry).expect("an entry serializes");
                        println!("{MARK}entry {json}");
                    }
                    println!("{MARK}reported");
                }
                _ => break,
            }
        }
    });
}

async fn hold_and_write<R: LeaseStore + FenceStore>(
    keeper: &Keeper,
    store: &R,
    id: &str,
    scope: &str,
) {
    let mut answer = None;
    for _ in 0..ADMIT_TRIES {
        match keeper.admit(keeper.request(id).scope(scope)).await {
            Ok(AdmitOutcome::Admitted { guard, .. }) => {
                answer = Some(Ok(guard));
                break;
            }
            // An unknown outcome: the retry finds the record, ours or not.
            Err(error) => answer = Some(Err(error.to_string())),
            Ok(other) => {
                answer = Some(Err(format!("{other:?}")));
                break;
            }
        }
    }
    let guard = match answer {
        Some(Ok(guard)) => guard,
        failed => {
            println!("{MARK}failed to admit {id}: {failed:?}");
            return;
        }
    };
    let token = guard.token();
    let mut told = false;
    loop {
        // A paused process resumes here or inside the gate call: the write
        // it then makes carries the old fence, and the gate must refuse it.
        let written = store.check_fence(scope, guard.fence()).await;
        if !told && matches!(written, Ok(FenceCheck::Accepted)) {
            // The host clock read first, so the deadline said is never later
            // than the keeper's.
            let now = monotonic_nanos();
            let remaining = guard.confirmed_deadline().map_or(0, |deadline| {
                deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .as_nanos()
            });
            println!(
                "{MARK}holding {} {}",
                guard.fence(),
                u128::from(now) + remaining
            );
            told = true;
        }
        tokio::select! {
            () = token.cancelled() => break,
            () = tokio::time::sleep(WRITE_EVERY) => {}
        }
    }
    println!("{MARK}lost {}", monotonic_nanos());
}
