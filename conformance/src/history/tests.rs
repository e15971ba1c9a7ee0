//! The checker shown to catch each property: a real history, recorded on
//! the memory store, is clean; then each property's violation is planted by
//! editing its entries, and the verdict names exactly that property, with
//! the entries that show it. Hand-built histories cover the edge cases the
//! checker must not count (unknown outcomes, one owner admitted twice) and
//! the JSON-lines form.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tenure_backend_memory::MemoryStore;
use tenure_lease_core::queue::{ClaimRequest, JobSettle, JobState, NewJob};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, FenceStore as _, JobQueue as _, LayerExt as _,
    LeaseRecord, LeaseStore as _, Renewal, Status, StatusChange, Takeover, TakeoverRequest,
    Transition,
};

use super::{
    check, read_json_lines, write_json_lines, Call, Entry, History, JobSeen, Property, RecordSeen,
    Reply, Settlement, Verdict,
};

/// The first owner's lease: short, so the takeover waits little.
const TTL: Duration = Duration::from_millis(40);
/// The resource both owners write through the gate.
const RESOURCE: &str = "report.csv";
/// A millisecond in the entries' nanoseconds.
const MS: u64 = 1_000_000;

/// Records a small workload on a memory store: `worker-a` is admitted
/// (scope, ttl), renews, starts and writes through the gate; once its lease
/// has lapsed by the store's clock, `worker-b` takes the run over, writes
/// through the gate, and `worker-a`'s late write is refused and its renewal
/// lost; a job is enqueued, claimed and completed; `worker-b` finishes the
/// run; `checker` reads the run and the job last.
async fn record() -> tenure_lease_core::Result<Vec<Entry>> {
    let store = Arc::new(MemoryStore::new());
    let history = History::new();
    let a = Arc::clone(&store).layer(history.client("worker-a"));
    let b = Arc::clone(&store).layer(history.client("worker-b"));
    let reader = Arc::clone(&store).layer(history.client("checker"));

    let admission = a
        .admit(
            &AdmitRequest::new("run-1", "worker-a")
                .scope("account:1")
                .ttl(TTL),
        )
        .await?;
    let first = admission
        .admitted()
        .and_then(LeaseRecord::claim)
        .expect("the scope is free");
    let Renewal::Renewed { expires_at } = a.renew(&first, TTL).await? else {
        panic!("the fresh lease renews");
    };
    let started = a.transition(&first, &StatusChange::running()).await?;
    assert!(matches!(started, Transition::Applied(_)), "{started:?}");
    assert!(a.check_fence(RESOURCE, first.fence).await?.is_accepted());

    // Wait out the renewed lease by the store's own clock (one short sleep).
    let left = (expires_at - store.now().await?)
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(5)).await;

    let taken = b
        .claim_for_takeover(&TakeoverRequest::adopt(
            "run-1",
            "worker-b",
            Some(Duration::from_secs(30)),
        ))
        .await?;
    let Takeover::Taken(record) = taken else {
        panic!("the lapsed lease is taken over: {taken:?}");
    };
    let second = record.claim().expect("owned by worker-b");
    assert!(second.fence > first.fence);
    assert!(b.check_fence(RESOURCE, second.fence).await?.is_accepted());
    assert!(!a.check_fence(RESOURCE, first.fence).await?.is_accepted());
    assert!(matches!(a.renew(&first, TTL).await?, Renewal::Lost(_)));

    a.enqueue(&NewJob::new("mail", serde_json::json!({ "n": 1 })).id("job-1"))
        .await?;
    let claimed = a.claim(&ClaimRequest::new("mail", "worker-a", TTL)).await?;
    let job = claimed.first().expect("the job is claimable").claim.clone();
    let completed = a.complete(&job).await?;
    assert!(matches!(completed, JobSettle::Settled(_)), "{completed:?}");

    let finished = b.transition(&second, &StatusChange::succeeded()).await?;
    assert!(matches!(finished, Transition::Applied(_)), "{finished:?}");
    assert!(reader.get("run-1").await?.is_some());
    assert!(reader.get_job("job-1").await?.is_some());
    Ok(history.entries())
}

/// The workload's history, recorded once for all the tests that plant
/// violations in it (its one wait is the first lease's ttl).
fn recorded() -> Vec<Entry> {
    static RECORDED: OnceLock<Vec<Entry>> = OnceLock::new();
    RECORDED
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(record())
                .expect("the workload runs on the memory store")
        })
        .clone()
}

/// The index of the one entry `matches` picks out.
fn find(entries: &[Entry], what: &str, matches: impl Fn(&Entry) -> bool) -> usize {
    let found: Vec<usize> = (0..entries.len())
        .filter(|&index| matches(&entries[index]))
        .collect();
    assert_eq!(found.len(), 1, "expected one {what} in {entries:#?}");
    found[0]
}

/// The workload's entries, by what they did.
struct Marks {
    admit: usize,
    renewal: usize,
    takeover: usize,
    gate_b: usize,
    stale_gate_a: usize,
    enqueue: usize,
    job_claim: usize,
    complete: usize,
    finish: usize,
    read: usize,
    read_job: usize,
}

impl Marks {
    fn of(entries: &[Entry]) -> Marks {
        let gate = |client: &'static str, accepted: bool| {
            move |entry: &Entry| {
                entry.client == client
                    && matches!(entry.call, Call::CheckFence { .. })
                    && matches!(entry.reply, Reply::Accepted) == accepted
            }
        };
        Marks {
            admit: find(entries, "admission", |e| {
                matches!(e.call, Call::Admit { .. })
            }),
            renewal: find(
                entries,
                "confirmed renewal",
                |e| matches!(&e.reply, Reply::Renewals { renewed } if renewed == &[true]),
            ),
            takeover: find(entries, "takeover", |e| {
                matches!(e.call, Call::Takeover { .. })
            }),
            gate_b: find(entries, "worker-b's gate write", gate("worker-b", true)),
            stale_gate_a: find(entries, "worker-a's stale write", gate("worker-a", false)),
            enqueue: find(entries, "enqueue", |e| {
                matches!(e.call, Call::Enqueue { .. })
            }),
            job_claim: find(entries, "job claim", |e| {
                matches!(e.call, Call::ClaimJobs { .. })
            }),
            complete: find(entries, "completion", |e| {
                matches!(e.call, Call::Settle { .. })
            }),
            finish: find(entries, "terminal transition", |e| {
                matches!(
                    e.call,
                    Call::Transition {
                        to: Status::Succeeded,
                        ..
                    }
                )
            }),
            read: find(entries, "final read", |e| {
                matches!(e.call, Call::Get { .. })
            }),
            read_job: find(entries, "final job read", |e| {
                matches!(e.call, Call::GetJob { .. })
            }),
        }
    }
}

/// Asserts the verdict names `property` (at least once) and no other.
fn only(verdict: &Verdict, property: Property) {
    assert!(verdict.count(property) >= 1, "no {property} in {verdict}");
    for other in Property::ALL.into_iter().filter(|other| *other != property) {
        assert_eq!(verdict.count(other), 0, "{other} in {verdict}");
    }
}

/// Asserts one violation of `property` shows exactly `shown` (in the
/// history's order), two or three entries.
fn shows(verdict: &Verdict, property: Property, shown: &[&Entry]) {
    assert!((2..=3).contains(&shown.len()));
    let wanted: Vec<Entry> = shown.iter().map(|entry| (*entry).clone()).collect();
    assert!(
        verdict
            .violations
            .iter()
            .any(|violation| violation.property == property && violation.excerpt == wanted),
        "no {property} violation shows {wanted:#?} in {verdict}"
    );
}

/// `record` with its read answer, or `None`.
fn read_answer(entry: &mut Entry) -> &mut Option<RecordSeen> {
    match &mut entry.reply {
        Reply::Record { record } => record,
        other => panic!("not a read's answer: {other:?}"),
    }
}

#[test]
fn a_recorded_history_is_clean() {
    let entries = recorded();
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");
    assert_eq!(verdict.calls, entries.len());
    assert_eq!(verdict.unknown, 0);
    // The admission, the takeover, the job claim.
    assert_eq!(verdict.ownership_changes, 3);
    assert_eq!((verdict.writes_accepted, verdict.writes_refused), (2, 1));
    assert!(verdict.to_string().ends_with("no violation"), "{verdict}");
    // The recorder wrote down what the workload did.
    let marks = Marks::of(&entries);
    assert!(matches!(
        &entries[marks.admit].call,
        Call::Admit { scopes, ttl_us: Some(40_000), .. } if scopes.contains("account:1")
    ));
    assert!(matches!(
        &entries[marks.takeover].reply,
        Reply::Taken { record } if record.owner.as_deref() == Some("worker-b")
    ));
    assert!(matches!(
        &entries[marks.read].reply,
        Reply::Record { record: Some(record) } if record.status == Status::Succeeded
    ));
    assert!(matches!(
        &entries[marks.read_job].reply,
        Reply::Jobs { jobs } if jobs.len() == 1 && jobs[0].state == JobState::Completed
    ));
    assert!(entries
        .iter()
        .all(|entry| entry.sent <= entry.answered && entry.sent > 0));
}

#[test]
fn a_fence_handed_out_twice_breaks_fences_grow() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    let Reply::Taken { record } = &entries[marks.takeover].reply else {
        panic!("taken");
    };
    let fence = record.fence;
    let Reply::Claimed { claims } = &mut entries[marks.job_claim].reply else {
        panic!("claimed");
    };
    claims[0].fence = fence;
    let verdict = check(&entries);
    only(&verdict, Property::FencesGrow);
    assert_eq!(verdict.count(Property::FencesGrow), 1, "{verdict}");
    shows(
        &verdict,
        Property::FencesGrow,
        &[&entries[marks.takeover], &entries[marks.job_claim]],
    );
}

#[test]
fn a_later_grant_with_a_lower_fence_breaks_fences_grow() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    // Swap the takeover's fence and the later job claim's.
    let (Reply::Taken { record }, Reply::Claimed { claims }) = (
        entries[marks.takeover].reply.clone(),
        entries[marks.job_claim].reply.clone(),
    ) else {
        panic!("a takeover and a job claim");
    };
    let (lower, higher) = (record.fence, claims[0].fence);
    assert!(lower < higher);
    if let Reply::Taken { record } = &mut entries[marks.takeover].reply {
        record.fence = higher;
    }
    if let Reply::Claimed { claims } = &mut entries[marks.job_claim].reply {
        claims[0].fence = lower;
    }
    let verdict = check(&entries);
    only(&verdict, Property::FencesGrow);
    assert_eq!(verdict.count(Property::FencesGrow), 1, "{verdict}");
    shows(
        &verdict,
        Property::FencesGrow,
        &[&entries[marks.takeover], &entries[marks.job_claim]],
    );
}

#[test]
fn a_takeover_inside_the_lease_breaks_exclusive_ownership() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    // Answered just after the renewal was sent: inside the renewed lease.
    let renewal_sent = entries[marks.renewal].sent;
    let takeover = &mut entries[marks.takeover];
    takeover.sent = renewal_sent;
    takeover.answered = renewal_sent + 1;
    let verdict = check(&entries);
    only(&verdict, Property::ExclusiveOwnership);
    // The record and its scope were both held twice: one pair of owners,
    // one violation.
    assert_eq!(verdict.count(Property::ExclusiveOwnership), 1, "{verdict}");
    let shown = [
        &entries[marks.admit],
        &entries[marks.renewal],
        &entries[marks.takeover],
    ];
    shows(&verdict, Property::ExclusiveOwnership, &shown);
    let text = verdict.to_string();
    assert!(text.contains("lease:run-1"), "{text}");
}

#[test]
fn a_stale_write_accepted_breaks_the_gate() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    assert!(entries[marks.stale_gate_a].sent > entries[marks.gate_b].answered);
    entries[marks.stale_gate_a].reply = Reply::Accepted;
    let verdict = check(&entries);
    only(&verdict, Property::GateNeverGoesBack);
    assert_eq!(verdict.count(Property::GateNeverGoesBack), 1, "{verdict}");
    assert_eq!((verdict.writes_accepted, verdict.writes_refused), (3, 0));
    shows(
        &verdict,
        Property::GateNeverGoesBack,
        &[&entries[marks.gate_b], &entries[marks.stale_gate_a]],
    );
}

#[test]
fn an_unchecked_write_with_a_low_fence_breaks_the_gate() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    let Call::CheckFence { fence: low, .. } = entries[marks.stale_gate_a].call else {
        panic!("a gate write");
    };
    let after = entries
        .iter()
        .map(|entry| entry.answered)
        .max()
        .unwrap_or(0);
    entries.push(Entry {
        client: "worker-a".to_owned(),
        sent: after + MS,
        answered: after + 2 * MS,
        call: Call::UncheckedWrite {
            resource: RESOURCE.to_owned(),
            fence: low,
        },
        reply: Reply::Accepted,
    });
    let verdict = check(&entries);
    only(&verdict, Property::GateNeverGoesBack);
    assert_eq!(verdict.count(Property::GateNeverGoesBack), 1, "{verdict}");
    let last = entries.last().expect("just pushed");
    shows(
        &verdict,
        Property::GateNeverGoesBack,
        &[&entries[marks.gate_b], last],
    );
}

#[test]
fn a_record_read_gone_breaks_acknowledged_writes() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    *read_answer(&mut entries[marks.read]) = None;
    let verdict = check(&entries);
    only(&verdict, Property::AcknowledgedWritesKept);
    // The admission is gone, and so is the terminal write.
    assert_eq!(
        verdict.count(Property::AcknowledgedWritesKept),
        2,
        "{verdict}"
    );
    let kept = Property::AcknowledgedWritesKept;
    shows(
        &verdict,
        kept,
        &[&entries[marks.admit], &entries[marks.read]],
    );
    shows(
        &verdict,
        kept,
        &[&entries[marks.finish], &entries[marks.read]],
    );
}

#[test]
fn a_record_read_with_another_fence_breaks_acknowledged_writes() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    read_answer(&mut entries[marks.read])
        .as_mut()
        .expect("the run was read")
        .fence += 1;
    let verdict = check(&entries);
    only(&verdict, Property::AcknowledgedWritesKept);
    assert_eq!(
        verdict.count(Property::AcknowledgedWritesKept),
        1,
        "{verdict}"
    );
    shows(
        &verdict,
        Property::AcknowledgedWritesKept,
        &[&entries[marks.finish], &entries[marks.read]],
    );
}

#[test]
fn a_job_read_gone_breaks_acknowledged_writes() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    entries[marks.read_job].reply = Reply::Jobs { jobs: Vec::new() };
    let verdict = check(&entries);
    only(&verdict, Property::AcknowledgedWritesKept);
    // The enqueue is gone, and so is the completion.
    assert_eq!(
        verdict.count(Property::AcknowledgedWritesKept),
        2,
        "{verdict}"
    );
    let kept = Property::AcknowledgedWritesKept;
    shows(
        &verdict,
        kept,
        &[&entries[marks.enqueue], &entries[marks.read_job]],
    );
    shows(
        &verdict,
        kept,
        &[&entries[marks.complete], &entries[marks.read_job]],
    );
}

#[test]
fn a_job_completed_twice_breaks_acknowledged_writes() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    // A second acknowledged completion of the job, by another client, just
    // after the first.
    let mut again = entries[marks.complete].clone();
    again.client = "worker-b".to_owned();
    again.sent = entries[marks.complete].answered + 1;
    again.answered = again.sent + 1;
    assert!(again.answered < entries[marks.read_job].sent);
    entries.insert(marks.complete + 1, again);
    let verdict = check(&entries);
    only(&verdict, Property::AcknowledgedWritesKept);
    assert_eq!(
        verdict.count(Property::AcknowledgedWritesKept),
        1,
        "{verdict}"
    );
    shows(
        &verdict,
        Property::AcknowledgedWritesKept,
        &[&entries[marks.complete], &entries[marks.complete + 1]],
    );
    assert!(verdict.to_string().contains("completed twice"), "{verdict}");
}

// Hand-built histories.

fn scopes(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// An entry sent at `at_ms` milliseconds and answered half a millisecond
/// later.
fn entry(client: &str, at_ms: u64, call: Call, reply: Reply) -> Entry {
    Entry {
        client: client.to_owned(),
        sent: at_ms * MS,
        answered: at_ms * MS + MS / 2,
        call,
        reply,
    }
}

fn seen(id: &str, owner: &str, fence: u64, status: Status, held: &[&str]) -> RecordSeen {
    RecordSeen {
        id: id.to_owned(),
        owner: Some(owner.to_owned()),
        fence,
        status,
        scopes: scopes(held),
    }
}

/// `owner` admitted as `id` on `scope` with a 10 s lease, at `at_ms`.
fn admitted(owner: &str, at_ms: u64, id: &str, fence: u64, interrupted: Vec<RecordSeen>) -> Entry {
    entry(
        owner,
        at_ms,
        Call::Admit {
            id: id.to_owned(),
            owner: owner.to_owned(),
            scopes: scopes(&["s"]),
            ttl_us: Some(10_000_000),
        },
        Reply::Admitted {
            record: seen(id, owner, fence, Status::Pending, &["s"]),
            interrupted,
        },
    )
}

/// `claimer`'s adopting takeover of `id` at `at_ms`, answered `reply`.
fn takeover(claimer: &str, at_ms: u64, id: &str, reply: Reply) -> Entry {
    entry(
        claimer,
        at_ms,
        Call::Takeover {
            id: id.to_owned(),
            claimer: claimer.to_owned(),
            adopt: true,
            ttl_us: Some(10_000_000),
        },
        reply,
    )
}

fn gate(client: &str, at_ms: u64, fence: u64, reply: Reply) -> Entry {
    entry(
        client,
        at_ms,
        Call::CheckFence {
            resource: RESOURCE.to_owned(),
            fence,
        },
        reply,
    )
}

fn unknown(kind: &str) -> Reply {
    Reply::Unknown {
        kind: kind.to_owned(),
        error: format!("the store did not answer ({kind})"),
    }
}

#[test]
fn an_unknown_outcome_is_never_counted_against_anyone() {
    let job = |fence| JobSeen {
        id: "job-1".to_owned(),
        state: JobState::Completed,
        owner: Some("worker-a".to_owned()),
        fence,
    };
    let entries = vec![
        admitted("worker-a", 0, "run-1", 1, Vec::new()),
        gate("worker-a", 1, 1, Reply::Accepted),
        // During worker-a's valid lease: had it been taken, two owners.
        takeover("worker-b", 2, "run-1", unknown("timeout")),
        // Had it been applied, the gate would have gone back...
        gate("worker-b", 3, 5, Reply::Accepted),
        gate("worker-a", 4, 1, unknown("unavailable")),
        // ... and a job completed twice.
        entry(
            "worker-a",
            5,
            Call::Settle {
                claims: Vec::new(),
                how: Settlement::Complete,
            },
            Reply::Settles {
                settled: vec![Some(job(3))],
            },
        ),
        entry(
            "worker-a",
            6,
            Call::Settle {
                claims: Vec::new(),
                how: Settlement::Complete,
            },
            unknown("timeout"),
        ),
        // A read that failed says nothing about what was kept.
        entry(
            "checker",
            7,
            Call::Get {
                id: "run-1".to_owned(),
            },
            unknown("unavailable"),
        ),
    ];
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");
    assert_eq!((verdict.calls, verdict.unknown), (8, 4));
    assert_eq!(verdict.ownership_changes, 1);
    assert_eq!((verdict.writes_accepted, verdict.writes_refused), (2, 0));

    // The same takeover acknowledged is a violation: the test is not vacuous.
    let mut answered = entries;
    answered[2].reply = Reply::Taken {
        record: seen("run-1", "worker-b", 2, Status::Running, &["s"]),
    };
    let verdict = check(&answered);
    only(&verdict, Property::ExclusiveOwnership);
    shows(
        &verdict,
        Property::ExclusiveOwnership,
        &[&answered[0], &answered[2]],
    );
}

#[test]
fn an_owner_admitted_again_over_its_own_lease_is_no_overlap() {
    let interrupted = seen("run-1", "worker-a", 2, Status::Interrupted, &["s"]);
    let mut again = admitted("worker-a", 1, "run-2", 3, vec![interrupted]);
    let entries = vec![
        admitted("worker-a", 0, "run-1", 1, Vec::new()),
        again.clone(),
    ];
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");
    assert_eq!(verdict.ownership_changes, 2);

    // Another owner admitted over worker-a's valid lease overlaps it.
    again.client = "worker-b".to_owned();
    if let Call::Admit { owner, .. } = &mut again.call {
        "worker-b".clone_into(owner);
    }
    if let Reply::Admitted { record, .. } = &mut again.reply {
        record.owner = Some("worker-b".to_owned());
    }
    let entries = vec![entries[0].clone(), again];
    let verdict = check(&entries);
    only(&verdict, Property::ExclusiveOwnership);
    assert_eq!(verdict.count(Property::ExclusiveOwnership), 1, "{verdict}");
    shows(
        &verdict,
        Property::ExclusiveOwnership,
        &[&entries[0], &entries[1]],
    );
}

/// A takeover answered after its own deadline (a reply held up by the
/// network longer than the ttl) held nothing, so a holder it overlaps in
/// time is no violation; answered before the deadline, it is one.
#[test]
fn a_grant_answered_after_its_deadline_held_nothing() {
    let late_takeover = |answered_us: u64| Entry {
        client: "worker-b".to_owned(),
        sent: MS,
        answered: answered_us * 1_000,
        call: Call::Takeover {
            id: "run-1".to_owned(),
            claimer: "worker-b".to_owned(),
            adopt: true,
            ttl_us: Some(1_000),
        },
        reply: Reply::Taken {
            record: seen("run-1", "worker-b", 2, Status::Running, &["s"]),
        },
    };
    let entries = vec![
        admitted("worker-a", 0, "run-2", 1, Vec::new()),
        late_takeover(5_000),
    ];
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");

    let entries = vec![entries[0].clone(), late_takeover(1_500)];
    let verdict = check(&entries);
    only(&verdict, Property::ExclusiveOwnership);
    shows(
        &verdict,
        Property::ExclusiveOwnership,
        &[&entries[0], &entries[1]],
    );
}

#[test]
fn histories_round_trip_through_json_lines() -> Result<(), Box<dyn std::error::Error>> {
    let mut entries = recorded();
    entries.extend([
        takeover("worker-c", 1, "run-9", unknown("timeout")),
        // Adopted with no lease, as a single-worker keeper adopts.
        entry(
            "worker-c",
            1,
            Call::Takeover {
                id: "run-10".to_owned(),
                claimer: "worker-c".to_owned(),
                adopt: true,
                ttl_us: None,
            },
            Reply::NotTaken,
        ),
        entry(
            "worker-c",
            2,
            Call::Admit {
                id: String::new(),
                owner: "worker-c".to_owned(),
                scopes: BTreeSet::new(),
                ttl_us: None,
            },
            Reply::Refused {
                kind: "invalid_input".to_owned(),
            },
        ),
        entry(
            "worker-c",
            3,
            Call::UncheckedWrite {
                resource: RESOURCE.to_owned(),
                fence: 7,
            },
            Reply::Accepted,
        ),
        entry(
            "worker-c",
            4,
            Call::Other {
                name: "now".to_owned(),
            },
            Reply::Other {
                label: "now".to_owned(),
            },
        ),
    ]);
    let mut written = Vec::new();
    write_json_lines(&entries, &mut written)?;
    let text = String::from_utf8(written.clone()).expect("JSON is UTF-8");
    assert_eq!(text.lines().count(), entries.len());
    assert_eq!(read_json_lines(Cursor::new(&written))?, entries);

    // Blank lines are skipped; a line that is no entry is named.
    let first = text.lines().next().expect("a line");
    let damaged = format!("{first}\n\n{{\"client\": \"worker-a\"}}\n{first}\n");
    let error = read_json_lines(Cursor::new(damaged)).expect_err("line 3 is no entry");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("line 3 "), "{error}");
    let error = read_json_lines(Cursor::new(format!("{first}\nnot json\n")))
        .expect_err("line 2 is no entry");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("line 2 "), "{error}");
    assert_eq!(
        read_json_lines(Cursor::new(format!("\n{first}\n\n")))?,
        entries[..1]
    );
    Ok(())
}

#[test]
fn admissions_with_interruptions_hand_out_fences_in_order() {
    let interrupted = seen("run-1", "worker-b", 2, Status::Interrupted, &["s"]);
    let mut entries = vec![
        admitted("worker-a", 0, "run-1", 1, Vec::new()),
        admitted("worker-b", 20_000, "run-2", 3, vec![interrupted]),
    ];
    assert!(check(&entries).is_clean(), "{}", check(&entries));
    // An interruption's fence below one acknowledged before it.
    if let Reply::Admitted { interrupted, .. } = &mut entries[1].reply {
        interrupted[0].fence = 1;
    }
    let verdict = check(&entries);
    only(&verdict, Property::FencesGrow);
    shows(&verdict, Property::FencesGrow, &[&entries[0], &entries[1]]);
}

/// The scope's holder gives it up without finishing: by stopping its run
/// (`Interrupted`), or by being admitted again over it (its earlier run is
/// interrupted) and then finishing; another owner may then be admitted at
/// once, long before the first lease would have ended.
#[tokio::test]
async fn scopes_given_up_early_are_free_for_another_owner() -> tenure_lease_core::Result<()> {
    let hour = Duration::from_secs(3600);
    let store = Arc::new(MemoryStore::new());
    let history = History::new();
    let a = Arc::clone(&store).layer(history.client("worker-a"));
    let b = Arc::clone(&store).layer(history.client("worker-b"));
    let admit = |id: &str, owner: &str, scope: &str| {
        AdmitRequest::new(id, owner)
            .scope(scope)
            .ttl(hour)
            .strategy(AdmitStrategy::Interrupt)
    };

    // Stopped: Running, then Interrupted by its owner.
    let stopped = a.admit(&admit("run-1", "worker-a", "stop")).await?;
    let stopped = stopped.admitted().and_then(LeaseRecord::claim);
    let stopped = stopped.expect("the scope is free");
    a.transition(&stopped, &StatusChange::running()).await?;
    let stop = a
        .transition(&stopped, &StatusChange::interrupted("shutting down"))
        .await?;
    assert!(matches!(stop, Transition::Applied(_)), "{stop:?}");
    let after_stop = b.admit(&admit("run-2", "worker-b", "stop")).await?;
    assert!(after_stop.admitted().is_some(), "{after_stop:?}");

    // Admitted again: the first run is interrupted, the second finishes.
    a.admit(&admit("run-3", "worker-a", "again")).await?;
    let again = a.admit(&admit("run-4", "worker-a", "again")).await?;
    let Admission::Admitted {
        record,
        interrupted,
    } = &again
    else {
        panic!("worker-a interrupts its own run: {again:?}");
    };
    assert_eq!(interrupted.len(), 1);
    let claim = record.claim().expect("owned");
    a.transition(&claim, &StatusChange::succeeded()).await?;
    let after_again = b.admit(&admit("run-5", "worker-b", "again")).await?;
    assert!(after_again.admitted().is_some(), "{after_again:?}");

    let verdict = check(&history.entries());
    assert!(verdict.is_clean(), "{verdict}");
    assert_eq!(verdict.ownership_changes, 5);
    Ok(())
}

/// An admission whose outcome is unknown may have interrupted its owner's
/// earlier run: a later owner admitted over it is not counted.
#[test]
fn an_unknown_admission_may_have_interrupted_its_owners_run() {
    let mut maybe = admitted("worker-a", 1, "run-2", 2, Vec::new());
    maybe.reply = unknown("timeout");
    if let Call::Admit { ttl_us, .. } = &mut maybe.call {
        *ttl_us = Some(50_000);
    }
    let entries = vec![
        admitted("worker-a", 0, "run-1", 1, Vec::new()),
        maybe,
        admitted("worker-b", 1_000, "run-3", 4, Vec::new()),
    ];
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");
    // Without the unknown admission, worker-b overlaps worker-a.
    let verdict = check(&[entries[0].clone(), entries[2].clone()]);
    only(&verdict, Property::ExclusiveOwnership);
}

/// A purge may remove what finished, and a purged gate accepts any fence
/// again: what is read or written after a purge is not held against the
/// store.
#[test]
fn reads_and_gate_writes_after_a_purge_are_not_judged() {
    let mut entries = recorded();
    let marks = Marks::of(&entries);
    *read_answer(&mut entries[marks.read]) = None;
    let read_sent = entries[marks.read].sent;
    let purge = |name: &str| Entry {
        client: "operator".to_owned(),
        sent: read_sent - 2,
        answered: read_sent - 1,
        call: Call::Other {
            name: name.to_owned(),
        },
        reply: Reply::Other {
            label: "purged".to_owned(),
        },
    };
    entries.push(purge("purge"));
    let verdict = check(&entries);
    assert!(verdict.is_clean(), "{verdict}");

    let mut entries = recorded();
    let last = entries
        .iter()
        .map(|entry| entry.answered)
        .max()
        .unwrap_or(0);
    let low_write = |client: &str, at: u64| Entry {
        client: client.to_owned(),
        sent: at,
        answered: at + 1,
        call: Call::UncheckedWrite {
            resource: RESOURCE.to_owned(),
            fence: 1,
        },
        reply: Reply::Accepted,
    };
    entries.push(low_write("late", last + 10));
    assert_eq!(check(&entries).count(Property::GateNeverGoesBack), 1);
    let mut gates = purge("purge_fences");
    gates.sent = last + 2;
    gates.answered = last + 3;
    entries.push(gates);
    assert!(check(&entries).is_clean());
}
