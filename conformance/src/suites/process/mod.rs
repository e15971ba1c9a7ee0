//! The process suite: several OS processes sharing one store.
//!
//! Threads in one process share a connection pool and a runtime; separate
//! processes share nothing but the store, which is what a deployment looks
//! like. A test of this suite re-invokes its own binary as child processes
//! (an environment variable, [`WORKER_VAR`], selects the child mode, so the
//! test the macro generates is its own child entry point). The parent
//! creates a store the children can open ([`ProcessSupport`]) and prepares
//! it; each child opens it, says it is ready, waits for "go" on stdin,
//! plays its part and prints every call and answer as a JSON line; the
//! parent collects the lines and checks them against each other and the
//! store.
//!
//! [`SEED_VAR`] fixes the random seed of a run (a failure names its seed).

mod claims;
mod history;

pub use claims::processes_race_admissions_takeovers_and_claims;
pub use history::processes_race_random_history;

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{BufRead, BufReader, Write as _};
use std::pin::Pin;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;

use serde_json::Value;

use super::{define_suite, factory_unavailable, report_note, unsupported};
pub use crate::capability::process::{ProcessSupport, SharedStore};
use crate::harness::{conclude, guarded, runtime, with_cleanup, CaseOutcome, Factory};

/// Child processes per scenario.
const PROCESSES: usize = 3;
/// Rounds each child plays.
const ROUNDS: usize = 15;
/// The environment variable naming a child's worker; set, the test plays as
/// that child instead of as the parent.
pub const WORKER_VAR: &str = "TENURE_CONFORMANCE_WORKER";
/// The environment variable by which the parent tells its children where
/// the shared store is ([`SharedStore::address`]).
const ADDRESS_VAR: &str = "TENURE_CONFORMANCE_ADDRESS";

/// A boxed future of the process suite.
type Step<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One scenario of the suite: what the parent prepares, what each child
/// plays, what the parent checks.
pub struct ProcessScenario<S> {
    /// Parent side, before go.
    prepare: fn(Arc<S>) -> Step<()>,
    /// Child side: plays as `worker` with randomness from `seed`, printing
    /// every answer with [`answer`].
    play: fn(Arc<S>, String, u64) -> Step<()>,
    /// Parent side, after every child exited: checks, answers a summary.
    check: fn(Arc<S>, Vec<ChildAnswers>) -> Step<String>,
}

define_suite! {$
    /// Expands to one `#[test]` per lease scenario of the [process
    /// suite](crate::suites::process), named after it. Each test is also
    /// its own child process: the factory expression must build the same
    /// factory in the children (read the same environment). Skipped with
    /// the reason when [`Factory::processes`] answers `None`.
    ///
    /// ```ignore
    /// tenure_conformance::tenure_process_conformance!(MyFactory::from_env());
    /// ```
    tenure_process_conformance => process [processes_race_random_history]
}

define_suite! {$
    /// Like [`tenure_process_conformance!`], for the scenarios that also
    /// claim jobs; the factory's store must implement `JobQueue`.
    tenure_queue_process_conformance => process [processes_race_admissions_takeovers_and_claims]
}

/// The body of each test [`tenure_process_conformance!`](crate::tenure_process_conformance)
/// generates: the parent's side, or a child's when [`WORKER_VAR`] is set.
/// `module` is the test's `module_path!()`, so the parent can name the test
/// to its children.
#[doc(hidden)]
pub fn run_named<F: Factory>(
    factory: F,
    module: &str,
    name: &str,
    scenario: fn() -> ProcessScenario<F::Store>,
) {
    if let Ok(worker) = std::env::var(WORKER_VAR) {
        return play_as_child(&factory, worker, scenario());
    }
    // The test's path in its binary: its module path without the crate.
    let test = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    };
    let outcome = runtime().block_on(run_as_parent(&factory, test, scenario()));
    conclude(name, outcome);
}

/// A child's side: opens the shared store, waits for go, plays. Panics
/// (failing the child, and so the parent) on any error.
fn play_as_child<F: Factory>(factory: &F, worker: String, scenario: ProcessScenario<F::Store>) {
    let processes = factory
        .processes()
        .expect("a child runs only for a factory offering processes");
    let address = std::env::var(ADDRESS_VAR).expect("the parent names the shared store");
    let seed = seed();
    let runtime = runtime();
    let store = runtime
        .block_on(processes.open_shared(&address))
        .unwrap_or_else(|error| panic!("{worker} could not open the shared store: {error}"));
    wait_for_go();
    runtime.block_on((scenario.play)(Arc::new(store), worker, seed));
}

/// The parent's side: creates and prepares the shared store, runs the
/// children, checks, tears the store down.
pub(crate) async fn run_as_parent<F: Factory>(
    factory: &F,
    test: String,
    scenario: ProcessScenario<F::Store>,
) -> CaseOutcome {
    let Some(processes) = factory.processes() else {
        return unsupported("store other processes can open", "processes");
    };
    if let Some(outcome) = factory_unavailable(factory) {
        return outcome;
    }
    let shared = match processes.create_shared().await {
        Ok(shared) => shared,
        Err(error) => {
            return CaseOutcome::Failed(format!("factory could not create a shared store: {error}"))
        }
    };
    let store = Arc::new(shared.store);
    let seed = seed();
    let checked = Arc::clone(&store);
    let address = shared.address;
    let outcome = guarded(async move {
        (scenario.prepare)(Arc::clone(&checked)).await;
        let children = test.clone();
        let results = tokio::task::spawn_blocking(move || {
            run_children(
                &children,
                PROCESSES,
                &[(ADDRESS_VAR, address), (SEED_VAR, seed.to_string())],
            )
        })
        .await
        .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()));
        let summary = (scenario.check)(checked, results).await;
        report_note(
            &test,
            &format!("{PROCESSES} processes, seed {seed}: {summary}"),
        );
        Ok(())
    })
    .await;
    let outcome = match outcome {
        CaseOutcome::Failed(why) => CaseOutcome::Failed(format!("{why} (with {SEED_VAR}={seed})")),
        other => other,
    };
    with_cleanup(outcome, factory.teardown(&store).await)
}

/// Prefix of every answer line a child prints.
const ANSWER_MARK: &str = "tenure-answer ";
/// The line a child prints once connected, before it waits for "go".
const READY_MARK: &str = "tenure-ready";

/// What one child process answered, in the order it got the answers.
#[derive(Debug)]
pub(crate) struct ChildAnswers {
    /// The worker name the child ran as.
    pub(crate) worker: String,
    /// Its answers, one JSON object per call.
    pub(crate) answers: Vec<Value>,
}

/// Spawns `workers` copies of the current test binary running only
/// `test_name`, each with [`WORKER_VAR`] set to its worker name
/// (`worker-0`...) and the variables of `env`; waits until every child is
/// ready, says go to all of them, and returns their answers once they all
/// exited. Panics if a child fails.
fn run_children(test_name: &str, workers: usize, env: &[(&str, String)]) -> Vec<ChildAnswers> {
    let mut children: Vec<(String, Child, BufReader<ChildStdout>)> = (0..workers)
        .map(|index| {
            let worker = format!("worker-{index}");
            let mut child = Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
                .env(WORKER_VAR, &worker)
                .envs(env.iter().map(|(name, value)| (name, value)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a child process");
            let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
            (worker, child, stdout)
        })
        .collect();
    for (worker, _, stdout) in &mut children {
        wait_for_ready(worker, stdout);
    }
    for (_, child, _) in &mut children {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(b"go\n").expect("say go");
    }
    children
        .into_iter()
        .map(|(worker, mut child, stdout)| {
            let answers = stdout
                .lines()
                .map(|line| line.expect("child output"))
                .filter_map(|line| {
                    line.split_once(ANSWER_MARK).map(|(_, json)| {
                        serde_json::from_str::<Value>(json).expect("a JSON answer")
                    })
                })
                .collect();
            let status = child.wait().expect("the child exits");
            assert!(status.success(), "{worker} failed: {status}");
            ChildAnswers { worker, answers }
        })
        .collect()
}

fn wait_for_ready(worker: &str, stdout: &mut impl BufRead) {
    let mut line = String::new();
    loop {
        line.clear();
        let read = stdout.read_line(&mut line).expect("child output");
        assert!(read > 0, "{worker} exited before it was ready");
        if line.contains(READY_MARK) {
            return;
        }
    }
}

/// Child side: says it is ready and blocks until the parent says go.
fn wait_for_go() {
    println!("{READY_MARK}");
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .expect("the parent says go");
}

/// Child side: prints one answer line for the parent.
pub(crate) fn answer(value: Value) {
    println!("{ANSWER_MARK}{value}");
}

/// The field `name` of `answer`; panics naming the answer if it is missing.
pub(crate) fn field<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer
        .get(name)
        .unwrap_or_else(|| panic!("answer {answer} has no {name}"))
}

/// The fences one answer handed out, in the order the store drew them: the
/// fences of the records it interrupted (key `interrupted`, objects with a
/// `fence`), then its own (key `fence`).
fn handed_out(answer: &Value) -> Vec<u64> {
    let interrupted = answer
        .get("interrupted")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|each| each.get("fence").and_then(Value::as_u64));
    interrupted
        .chain(answer.get("fence").and_then(Value::as_u64))
        .collect()
}

/// Checks the fences the answers handed out: the ones one process got grow
/// in the order it got them, and no fence was handed out twice. Answers how
/// many were handed out.
pub(crate) fn check_fences(results: &[ChildAnswers]) -> usize {
    let mut everyone = Vec::new();
    for child in results {
        let fences: Vec<u64> = child.answers.iter().flat_map(handed_out).collect();
        assert!(
            fences.windows(2).all(|pair| pair[0] < pair[1]),
            "fences handed to one process grow in the order it got them: {fences:?} ({})",
            child.worker
        );
        everyone.extend(fences);
    }
    let distinct: BTreeSet<u64> = everyone.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        everyone.len(),
        "no fence is handed out twice"
    );
    everyone.len()
}

/// The environment variable that fixes a history's random seed (default: a
/// new one each run). The parent passes its seed to the children in it.
pub const SEED_VAR: &str = "TENURE_MULTI_PROCESS_SEED";

/// The seed [`SEED_VAR`] names, else a fresh one.
pub(crate) fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={text:?} is not a number")),
        Err(_) => fastrand::u64(..),
    }
}
