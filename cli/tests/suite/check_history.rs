//! `tenure check-history`: a history recorded on a memory store passes, the
//! same history with a planted violation fails with exit 1 naming it, and a
//! file that is no history is a usage error; no store is needed.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use predicates::prelude::*;
use predicates::str::contains;
use tenure::conformance::history::{write_json_lines, Call, Entry, History, Reply};
use tenure::{AdmitRequest, FenceStore as _, LayerExt as _, LeaseStore as _};

use support::{tenure, tenure_bare};

const HOUR: Duration = Duration::from_secs(3600);

/// Two workers admitted on their own scopes, each writing through one
/// gate: worker-b's higher fence first, so worker-a's is refused as stale;
/// then a final read.
async fn recorded() -> Vec<Entry> {
    let store = Arc::new(tenure::memory::MemoryStore::new());
    let history = History::new();
    let a = Arc::clone(&store).layer(history.client("worker-a"));
    let b = Arc::clone(&store).layer(history.client("worker-b"));
    let admit =
        |id: &str, owner: &str, scope: &str| AdmitRequest::new(id, owner).scope(scope).ttl(HOUR);
    let first = a
        .admit(&admit("run-1", "worker-a", "account:1"))
        .await
        .expect("admit answers");
    let first = first.admitted().expect("a free scope").fence;
    let second = b
        .admit(&admit("run-2", "worker-b", "account:2"))
        .await
        .expect("admit answers");
    let second = second.admitted().expect("a free scope").fence;
    assert!(b
        .check_fence("report.csv", second)
        .await
        .expect("the gate answers")
        .is_accepted());
    assert!(!a
        .check_fence("report.csv", first)
        .await
        .expect("the gate answers")
        .is_accepted());
    a.get("run-1").await.expect("get answers");
    history.entries()
}

fn write(dir: &Path, name: &str, entries: &[Entry]) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).expect("a history file");
    write_json_lines(entries, file).expect("the history is written");
    path
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn json_of(output: &[u8]) -> serde_json::Value {
    serde_json::from_slice(output).expect("the command printed JSON")
}

#[tokio::test]
async fn a_clean_history_passes_and_a_planted_violation_fails() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let entries = recorded().await;
    let clean = write(dir.path(), "clean.jsonl", &entries);
    // worker-a's stale write, accepted after worker-b's higher fence.
    let mut planted = entries.clone();
    let stale = planted
        .iter_mut()
        .find(|entry| matches!(entry.reply, Reply::Stale { .. }))
        .expect("a refused write");
    assert!(matches!(stale.call, Call::CheckFence { .. }));
    stale.reply = Reply::Accepted;
    let planted = write(dir.path(), "planted.jsonl", &planted);

    tenure_bare(&["check-history", arg(&clean)])
        .assert()
        .success()
        .stdout(contains("5 calls (0 unknown)").and(contains("no violation")))
        .stderr("");
    tenure_bare(&["check-history", arg(&planted)])
        .assert()
        .code(1)
        .stdout(
            contains("gate_never_goes_back 1")
                .and(contains(
                    "gate_never_goes_back: report.csv accepted a write",
                ))
                .and(contains("\"client\":\"worker-a\"")),
        )
        .stderr(contains("breaks gate_never_goes_back (1)").and(contains("planted.jsonl")));

    let output = tenure_bare(&["check-history", "--json", arg(&clean)])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let summary = json_of(&output);
    assert_eq!(summary["clean"], true, "{summary}");
    assert_eq!(summary["calls"], 5, "{summary}");
    assert_eq!(summary["ownership_changes"], 2, "{summary}");
    assert_eq!(summary["writes_accepted"], 1, "{summary}");
    assert_eq!(summary["writes_refused"], 1, "{summary}");
    assert_eq!(
        summary["violations"]["gate_never_goes_back"], 0,
        "{summary}"
    );
    assert_eq!(summary["excerpts"], serde_json::json!([]), "{summary}");

    let output = tenure_bare(&["check-history", "--json", arg(&planted)])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let summary = json_of(&output);
    assert_eq!(summary["clean"], false, "{summary}");
    for (property, count) in [
        ("fences_grow", 0),
        ("exclusive_ownership", 0),
        ("gate_never_goes_back", 1),
        ("acknowledged_writes_kept", 0),
    ] {
        assert_eq!(summary["violations"][property], count, "{summary}");
    }
    let excerpt = &summary["excerpts"][0];
    assert_eq!(excerpt["property"], "gate_never_goes_back", "{summary}");
    let shown = excerpt["entries"].as_array().expect("entries");
    assert_eq!(shown.len(), 2, "{summary}");
    assert_eq!(shown[0]["client"], "worker-b", "{summary}");
    assert_eq!(shown[1]["client"], "worker-a", "{summary}");
}

#[tokio::test]
async fn a_history_reads_from_standard_input_without_a_store() {
    let mut lines = Vec::new();
    write_json_lines(&recorded().await, &mut lines).expect("the history is written");
    tenure_bare(&["check-history", "-"])
        .write_stdin(lines.clone())
        .assert()
        .success()
        .stdout(contains("no violation"));
    // A URL, even a malformed one, is never opened.
    tenure("nonsense", &["check-history", "-"])
        .write_stdin(lines)
        .assert()
        .success();
    tenure_bare(&["check-history", "-"])
        .write_stdin("")
        .assert()
        .success()
        .stdout(contains("0 calls"));
}

#[test]
fn a_file_that_is_no_history_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let missing = dir.path().join("missing.jsonl");
    tenure_bare(&["check-history", arg(&missing)])
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("cannot read the history in").and(contains("missing.jsonl")));
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "\n{\"client\": \"worker-a\"}\n").expect("written");
    tenure_bare(&["check-history", arg(&garbage)])
        .assert()
        .code(2)
        .stderr(contains("line 2 is not a history entry"));
    tenure_bare(&["check-history", "-", "--json"])
        .write_stdin("not json\n")
        .assert()
        .code(2)
        .stderr(contains("standard input").and(contains("line 1")));
    tenure_bare(&["check-history"]).assert().code(2);
}

#[test]
fn check_history_has_help() {
    tenure_bare(&["--help"])
        .assert()
        .success()
        .stdout(contains("check-history"));
    tenure_bare(&["check-history", "--help"])
        .assert()
        .success()
        .stdout(contains("Usage: tenure check-history").and(contains("--json")));
}
