//! The checker: four safety properties judged over a whole history.
//!
//! Every judgement is of *definite* violations: an entry whose outcome is
//! unknown ([`Reply::Unknown`]) is taken to have done whatever makes the
//! history legal, so a clean verdict under faults means no answer the
//! clients were given contradicts the contract, and a violation is a
//! contradiction shown by the entries named with it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use tenure_lease_core::queue::JobState;
use tenure_lease_core::Status;

use super::{Call, Entry, Reply, Settlement};

/// A safety property the checker judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Property {
    /// Every acknowledged ownership change (admission, interruption,
    /// takeover, job claim, take-back) carries a fence no other answer
    /// carried, greater than every fence acknowledged before it was sent.
    FencesGrow,
    /// No two owners' acknowledged ownerships of one scope, lease or job
    /// overlap in time. An ownership lasts from its answer until the send of
    /// its last confirmed renewal (or of the grant itself) plus the ttl, or
    /// until its owner sent its release (a terminal write or a stop), or an
    /// admission of its own that interrupted it (or, its outcome unknown,
    /// may have).
    ///
    /// The store's expiry is set no earlier than the send of the call that
    /// set it plus the ttl, as long as the store's clock runs no faster than
    /// the host's monotonic clock; a takeover grace of a few milliseconds
    /// covers the rate difference of any slewed clock. With no grace at all
    /// a takeover at the exact expiry can be reported.
    ExclusiveOwnership,
    /// A resource never accepts a write holding a fence lower than one it
    /// accepted before the write was sent (through a gate, or unchecked in
    /// a control run).
    GateNeverGoesBack,
    /// Every acknowledged admission, enqueue, terminal write and completion
    /// is there, unchanged, when the history's last read of it is sent, and
    /// no job is completed twice with both completions acknowledged.
    AcknowledgedWritesKept,
}

impl Property {
    /// Every property, in the order verdicts list them.
    pub const ALL: [Property; 4] = [
        Property::FencesGrow,
        Property::ExclusiveOwnership,
        Property::GateNeverGoesBack,
        Property::AcknowledgedWritesKept,
    ];

    /// A stable snake-case name, for reports and tables.
    pub fn name(self) -> &'static str {
        match self {
            Property::FencesGrow => "fences_grow",
            Property::ExclusiveOwnership => "exclusive_ownership",
            Property::GateNeverGoesBack => "gate_never_goes_back",
            Property::AcknowledgedWritesKept => "acknowledged_writes_kept",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One violation: the property, what went wrong, and the shortest excerpt
/// of the history that shows it (two or three entries).
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The property broken.
    pub property: Property,
    /// What the excerpt shows, in a sentence.
    pub explanation: String,
    /// The entries that show it, in the history's order.
    pub excerpt: Vec<Entry>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.property, self.explanation)?;
        for entry in &self.excerpt {
            let line = serde_json::to_string(entry).unwrap_or_else(|_| format!("{entry:?}"));
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Verdict {
    /// Entries judged.
    pub calls: usize,
    /// Entries whose outcome is unknown.
    pub unknown: usize,
    /// Acknowledged ownership changes (fences handed out to owners).
    pub ownership_changes: usize,
    /// Writes a resource accepted.
    pub writes_accepted: usize,
    /// Writes a gate refused as stale.
    pub writes_refused: usize,
    /// Every violation found, by property.
    pub violations: Vec<Violation>,
}

impl Verdict {
    /// Whether no property was broken.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many violations of `property` were found.
    pub fn count(&self, property: Property) -> usize {
        self.violations
            .iter()
            .filter(|violation| violation.property == property)
            .count()
    }

    /// The count of every property, as `fences_grow 0, exclusive_ownership
    /// 0, ...`: the form the kit's report lines use.
    pub fn counts(&self) -> String {
        Property::ALL
            .iter()
            .map(|property| format!("{property} {}", self.count(*property)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn found(&mut self, property: Property, explanation: String, excerpt: &[&Entry]) {
        self.violations.push(Violation {
            property,
            explanation,
            excerpt: excerpt.iter().map(|entry| (*entry).clone()).collect(),
        });
    }
}

/// Violations shown per property in a verdict's text; the rest are counted.
const SHOWN_PER_PROPERTY: usize = 3;

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} calls ({} unknown), {} ownership changes, {} writes accepted, {} refused as stale: ",
            self.calls,
            self.unknown,
            self.ownership_changes,
            self.writes_accepted,
            self.writes_refused
        )?;
        if self.is_clean() {
            return f.write_str("no violation");
        }
        writeln!(f, "violations: {}", self.counts())?;
        for property in Property::ALL {
            let mut shown = self
                .violations
                .iter()
                .filter(|violation| violation.property == property);
            for violation in shown.by_ref().take(SHOWN_PER_PROPERTY) {
                write!(f, "{violation}")?;
            }
            let more = shown.count();
            if more > 0 {
                writeln!(f, "  ... and {more} more of {property}")?;
            }
        }
        Ok(())
    }
}

/// Judges `entries` (in any order) against every [`Property`].
pub fn check(entries: &[Entry]) -> Verdict {
    let mut verdict = Verdict {
        calls: entries.len(),
        unknown: entries
            .iter()
            .filter(|entry| entry.reply.is_unknown())
            .count(),
        ..Verdict::default()
    };
    let grants = grants(entries);
    verdict.ownership_changes = grants.len();
    check_fences(entries, &mut verdict);
    check_ownership(entries, &grants, &mut verdict);
    check_gates(entries, &mut verdict);
    check_kept(entries, &mut verdict);
    verdict
}

/// The fences an entry's answer handed out: interrupted records' first,
/// then the owners'.
fn fences_handed_out(entry: &Entry) -> Vec<u64> {
    match (&entry.call, &entry.reply) {
        (
            Call::Admit { .. },
            Reply::Admitted {
                record,
                interrupted,
            },
        ) => interrupted
            .iter()
            .map(|each| each.fence)
            .chain([record.fence])
            .collect(),
        (Call::Takeover { .. }, Reply::Taken { record }) => vec![record.fence],
        (Call::ClaimJobs { .. } | Call::TakeBack { .. }, Reply::Claimed { claims }) => {
            claims.iter().map(|claim| claim.fence).collect()
        }
        _ => Vec::new(),
    }
}

/// An entry, by its index, and a value it carries.
type Valued = (usize, u64);

/// For each entry of `candidates` (an index into `entries` and a value),
/// its own value and the greatest value among the candidates answered
/// strictly before it was sent, with the entry holding it: one sweep over
/// both orders.
fn greatest_answered_before(
    entries: &[Entry],
    candidates: &[(usize, u64)],
) -> Vec<(usize, u64, Option<Valued>)> {
    let mut by_answer: Vec<(usize, u64)> = candidates.to_vec();
    by_answer.sort_by_key(|&(index, _)| entries[index].answered);
    let mut by_send: Vec<(usize, u64)> = candidates.to_vec();
    by_send.sort_by_key(|&(index, _)| entries[index].sent);
    let mut greatest: Option<(usize, u64)> = None;
    let mut next = 0;
    by_send
        .into_iter()
        .map(|(index, own)| {
            let sent = entries[index].sent;
            while next < by_answer.len() && entries[by_answer[next].0].answered < sent {
                let (earlier, value) = by_answer[next];
                if greatest.is_none_or(|(_, best)| value > best) {
                    greatest = Some((earlier, value));
                }
                next += 1;
            }
            (index, own, greatest)
        })
        .collect()
}

fn check_fences(entries: &[Entry], verdict: &mut Verdict) {
    let mut first_seen: HashMap<u64, usize> = HashMap::new();
    // Per entry handing fences out: its greatest (what later sends must
    // exceed) and its lowest (what must exceed earlier answers).
    let mut greatest_of: Vec<(usize, u64)> = Vec::new();
    let mut lowest_of: HashMap<usize, u64> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let fences = fences_handed_out(entry);
        for &fence in &fences {
            if let Some(&first) = first_seen.get(&fence) {
                verdict.found(
                    Property::FencesGrow,
                    format!("fence {fence} was handed out twice"),
                    &[&entries[first], entry],
                );
            } else {
                first_seen.insert(fence, index);
            }
        }
        if let (Some(&lowest), Some(&greatest)) = (fences.iter().min(), fences.iter().max()) {
            greatest_of.push((index, greatest));
            lowest_of.insert(index, lowest);
        }
    }
    for (index, _, before) in greatest_answered_before(entries, &greatest_of) {
        let own = lowest_of[&index];
        if let Some((earlier, fence)) = before.filter(|&(_, fence)| own < fence) {
            verdict.found(
                Property::FencesGrow,
                format!("fence {own} was handed out after fence {fence} had been acknowledged"),
                &[&entries[earlier], &entries[index]],
            );
        }
    }
}

/// One acknowledged ownership: of a lease record (and its scopes) or a job.
struct Grant {
    /// The entry that granted it.
    at: usize,
    owner: String,
    /// `lease:<id>` or `job:<id>`, then `scope:<scope>` for each scope held.
    keys: Vec<String>,
    id: String,
    fence: u64,
    /// The lease granted, in microseconds; `None`: none (the ownership
    /// lasts no longer than its answer).
    ttl_us: Option<u64>,
    is_job: bool,
}

fn lease_keys(id: &str, scopes: impl IntoIterator<Item = String>) -> Vec<String> {
    std::iter::once(format!("lease:{id}"))
        .chain(scopes.into_iter().map(|scope| format!("scope:{scope}")))
        .collect()
}

fn grants(entries: &[Entry]) -> Vec<Grant> {
    let mut grants = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        match (&entry.call, &entry.reply) {
            (Call::Admit { owner, ttl_us, .. }, Reply::Admitted { record, .. }) => {
                grants.push(Grant {
                    at,
                    owner: owner.clone(),
                    keys: lease_keys(&record.id, record.scopes.iter().cloned()),
                    id: record.id.clone(),
                    fence: record.fence,
                    ttl_us: *ttl_us,
                    is_job: false,
                });
            }
            (
                Call::Takeover {
                    claimer,
                    adopt,
                    ttl_us,
                    ..
                },
                Reply::Taken { record },
            ) => {
                // A failed takeover releases the scopes as it takes the record.
                let scopes = if *adopt {
                    record.scopes.iter().cloned().collect()
                } else {
                    Vec::new()
                };
                grants.push(Grant {
                    at,
                    owner: claimer.clone(),
                    keys: lease_keys(&record.id, scopes),
                    id: record.id.clone(),
                    fence: record.fence,
                    ttl_us: *ttl_us,
                    is_job: false,
                });
            }
            (
                Call::ClaimJobs { ttl_us, .. } | Call::TakeBack { ttl_us, .. },
                Reply::Claimed { claims },
            ) => {
                for claim in claims {
                    grants.push(Grant {
                        at,
                        owner: claim.owner.clone(),
                        keys: vec![format!("job:{}", claim.id)],
                        id: claim.id.clone(),
                        fence: claim.fence,
                        ttl_us: Some(*ttl_us),
                        is_job: true,
                    });
                }
            }
            _ => {}
        }
    }
    grants
}

/// A claim as the checker matches renewals and releases to grants.
type ClaimKey = (bool, String, String, u64);

/// Per claim, what extends or ends its ownership.
#[derive(Default)]
struct ClaimEvents {
    /// Confirmed renewals: (entry, deadline it confirms).
    renewals: Vec<(usize, u64)>,
    /// Releases sent (applied or unknown): their entries.
    releases: Vec<usize>,
}

fn claim_events(entries: &[Entry]) -> HashMap<ClaimKey, ClaimEvents> {
    let mut events: HashMap<ClaimKey, ClaimEvents> = HashMap::new();
    let mut add = |key: ClaimKey, renewal: Option<(usize, u64)>, release: Option<usize>| {
        let slot = events.entry(key).or_default();
        slot.renewals.extend(renewal);
        slot.releases.extend(release);
    };
    for (index, entry) in entries.iter().enumerate() {
        let unknown = entry.reply.is_unknown();
        match (&entry.call, &entry.reply) {
            (Call::Renew { claims, ttl_us }, Reply::Renewals { renewed }) => {
                for (claim, _) in claims.iter().zip(renewed).filter(|(_, renewed)| **renewed) {
                    let key = (false, claim.id.clone(), claim.owner.clone(), claim.fence);
                    add(key, Some((index, deadline(entry.sent, *ttl_us))), None);
                }
            }
            (Call::RenewJobs { claims, ttl_us }, Reply::JobRenewals { renewed }) => {
                for (claim, _) in claims.iter().zip(renewed).filter(|(_, renewed)| **renewed) {
                    let key = (true, claim.id.clone(), claim.owner.clone(), claim.fence);
                    add(key, Some((index, deadline(entry.sent, *ttl_us))), None);
                }
            }
            // Stopping a run (`Interrupted`) releases it as finishing does.
            (Call::Transition { claim, to }, reply)
                if (is_terminal(*to) || *to == Status::Interrupted)
                    && (unknown || matches!(reply, Reply::Transitioned { record: Some(_) })) =>
            {
                let key = (false, claim.id.clone(), claim.owner.clone(), claim.fence);
                add(key, None, Some(index));
            }
            (Call::Settle { claims, .. }, reply) => {
                let settled: Vec<bool> = match reply {
                    Reply::Settles { settled } => settled.iter().map(Option::is_some).collect(),
                    _ => vec![unknown; claims.len()],
                };
                for (claim, _) in claims.iter().zip(settled).filter(|(_, settled)| *settled) {
                    let key = (true, claim.id.clone(), claim.owner.clone(), claim.fence);
                    add(key, None, Some(index));
                }
            }
            _ => {}
        }
    }
    events
}

/// The admissions that interrupted a record, by the record's id and the
/// admission's owner: matched against a grant of that owner, they are the
/// owner's own re-admissions over its record (contract §3: an owner's
/// record is interruptible whatever its lease).
fn self_interruptions(entries: &[Entry]) -> HashMap<(&str, &str), Vec<usize>> {
    let mut found: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if let (Call::Admit { owner, .. }, Reply::Admitted { interrupted, .. }) =
            (&entry.call, &entry.reply)
        {
            for record in interrupted {
                found
                    .entry((record.id.as_str(), owner.as_str()))
                    .or_default()
                    .push(index);
            }
        }
    }
    found
}

/// The admissions whose outcome is unknown, by each scope they asked for
/// and their owner: any may have interrupted a record of that owner holding
/// the scope.
fn unknown_admissions(entries: &[Entry]) -> HashMap<(&str, &str), Vec<usize>> {
    let mut found: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if let (Call::Admit { owner, scopes, .. }, true) = (&entry.call, entry.reply.is_unknown()) {
            for scope in scopes {
                found
                    .entry((scope.as_str(), owner.as_str()))
                    .or_default()
                    .push(index);
            }
        }
    }
    found
}

fn is_terminal(status: Status) -> bool {
    matches!(status, Status::Succeeded | Status::Failed)
}

fn deadline(sent: u64, ttl_us: u64) -> u64 {
    sent.saturating_add(ttl_us.saturating_mul(1_000))
}

/// A grant's ownership in time: from its answer to its end, with the
/// renewal that set the end, if one did.
struct Held {
    grant: usize,
    start: u64,
    end: u64,
    extended_by: Option<usize>,
}

fn check_ownership(entries: &[Entry], grants: &[Grant], verdict: &mut Verdict) {
    let events = claim_events(entries);
    let self_interruptions = self_interruptions(entries);
    let unknown_admissions = unknown_admissions(entries);
    let mut by_key: BTreeMap<&str, Vec<Held>> = BTreeMap::new();
    for (number, grant) in grants.iter().enumerate() {
        let entry = &entries[grant.at];
        let (mut end, mut extended_by) = match grant.ttl_us {
            Some(ttl_us) => (deadline(entry.sent, ttl_us), None),
            None => (entry.answered, None),
        };
        let key = (
            grant.is_job,
            grant.id.clone(),
            grant.owner.clone(),
            grant.fence,
        );
        if let (Some(claim), Some(_)) = (events.get(&key), grant.ttl_us) {
            for &(renewal, confirmed) in &claim.renewals {
                if confirmed > end {
                    end = confirmed;
                    extended_by = Some(renewal);
                }
            }
            if let Some(released) = claim.releases.iter().map(|&at| entries[at].sent).min() {
                if released < end {
                    end = released.max(entry.answered);
                    extended_by = None;
                }
            }
        }
        // An owner's admission interrupting its own record ends that record's
        // ownership: the owner let go of it, and was told so.
        // So may one of its admissions whose outcome is unknown, on a scope
        // the record holds.
        // Either ends it no earlier than the grant's answer, and an unknown
        // one only if it may have been applied after the record was made.
        let maybe_interrupted = grant
            .keys
            .iter()
            .filter_map(|key| key.strip_prefix("scope:"))
            .filter_map(|scope| unknown_admissions.get(&(scope, grant.owner.as_str())))
            .flatten()
            .filter(|&&at| entries[at].answered > entry.sent);
        let interrupted_by_owner = self_interruptions
            .get(&(grant.id.as_str(), grant.owner.as_str()))
            .into_iter()
            .flatten()
            .chain(maybe_interrupted)
            .map(|&at| entries[at].sent.max(entry.answered))
            .min();
        if let Some(released) = interrupted_by_owner.filter(|&released| released < end) {
            end = released;
            extended_by = None;
        }
        // A grant answered after its deadline gave its owner nothing: a
        // client measuring its lease from the send, as the keeper does,
        // knows on arrival that it has already expired.
        if end <= entry.answered {
            continue;
        }
        for key in &grant.keys {
            by_key.entry(key).or_default().push(Held {
                grant: number,
                start: entry.answered,
                end,
                extended_by,
            });
        }
    }
    // One overlapping pair is one violation, however many keys it shares.
    let mut reported: HashSet<(usize, usize)> = HashSet::new();
    for (key, mut held) in by_key {
        held.sort_by_key(|each| each.start);
        let mut open: Vec<&Held> = Vec::new();
        for later in &held {
            open.retain(|earlier| earlier.end > later.start);
            for earlier in &open {
                let (first, second) = (&grants[earlier.grant], &grants[later.grant]);
                if !reported.insert((earlier.grant, later.grant)) {
                    continue;
                }
                let mut excerpt = vec![&entries[first.at]];
                excerpt.extend(earlier.extended_by.map(|at| &entries[at]));
                excerpt.push(&entries[second.at]);
                verdict.found(
                    Property::ExclusiveOwnership,
                    format!(
                        "{key} was granted to {} (fence {}) while {} (fence {}) still held it, \
                         {} µs before its ownership ended",
                        second.owner,
                        second.fence,
                        first.owner,
                        first.fence,
                        (earlier.end - later.start) / 1_000
                    ),
                    &excerpt,
                );
            }
            open.push(later);
        }
    }
}

fn check_gates(entries: &[Entry], verdict: &mut Verdict) {
    let mut accepted: BTreeMap<&str, Vec<(usize, u64)>> = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let (resource, fence) = match &entry.call {
            Call::CheckFence { resource, fence } | Call::UncheckedWrite { resource, fence } => {
                (resource.as_str(), *fence)
            }
            _ => continue,
        };
        match entry.reply {
            Reply::Accepted => {
                verdict.writes_accepted += 1;
                accepted.entry(resource).or_default().push((index, fence));
            }
            Reply::Stale { .. } => verdict.writes_refused += 1,
            _ => {}
        }
    }
    // A purge of gates may forget one, which then accepts any fence again.
    let gates_purged = first_sent(entries, "purge_fences");
    for (resource, writes) in accepted {
        for (index, own, before) in greatest_answered_before(entries, &writes) {
            if gates_purged.is_some_and(|purged| purged < entries[index].answered) {
                continue;
            }
            if let Some((earlier, fence)) = before.filter(|&(_, fence)| own < fence) {
                verdict.found(
                    Property::GateNeverGoesBack,
                    format!(
                        "{resource} accepted a write with fence {own} after accepting one with \
                         fence {fence}"
                    ),
                    &[&entries[earlier], &entries[index]],
                );
            }
        }
    }
}

/// When the first call of the operation `name` (recorded as
/// [`Call::Other`]) was sent.
fn first_sent(entries: &[Entry], name: &str) -> Option<u64> {
    entries
        .iter()
        .filter(|entry| matches!(&entry.call, Call::Other { name: called } if called == name))
        .map(|entry| entry.sent)
        .min()
}

fn check_kept(entries: &[Entry], verdict: &mut Verdict) {
    // The last read of each record and job: what the history ends with.
    let mut last_record: HashMap<&str, usize> = HashMap::new();
    let mut last_job: HashMap<&str, usize> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let slot = match (&entry.call, &entry.reply) {
            (Call::Get { id }, Reply::Record { .. }) => last_record.entry(id.as_str()),
            (Call::GetJob { id }, Reply::Jobs { .. }) => last_job.entry(id.as_str()),
            _ => continue,
        };
        let last = slot.or_insert(index);
        if entries[*last].sent < entry.sent {
            *last = index;
        }
    }
    // A purge may remove what finished; what is read after one is not judged.
    let (records_purged, jobs_purged) = (
        first_sent(entries, "purge"),
        first_sent(entries, "purge_jobs"),
    );
    let read_after =
        |reads: &HashMap<&str, usize>, purged: Option<u64>, id: &str, write: &Entry| {
            reads.get(id).copied().filter(|&read| {
                entries[read].sent > write.answered
                    && purged.is_none_or(|purged| purged > entries[read].answered)
            })
        };
    let mut completions: HashMap<&str, usize> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        match (&entry.call, &entry.reply) {
            (Call::Admit { .. }, Reply::Admitted { record, .. }) => {
                if let Some(read) = read_after(&last_record, records_purged, &record.id, entry) {
                    if matches!(entries[read].reply, Reply::Record { record: None }) {
                        verdict.found(
                            Property::AcknowledgedWritesKept,
                            format!("admitted record {} is gone", record.id),
                            &[entry, &entries[read]],
                        );
                    }
                }
            }
            (
                Call::Transition { .. },
                Reply::Transitioned {
                    record: Some(written),
                },
            )
            | (Call::Takeover { adopt: false, .. }, Reply::Taken { record: written })
                if is_terminal(written.status) =>
            {
                if let Some(read) = read_after(&last_record, records_purged, &written.id, entry) {
                    let kept = matches!(&entries[read].reply, Reply::Record { record: Some(now) }
                        if now.status == written.status && now.fence == written.fence);
                    if !kept {
                        verdict.found(
                            Property::AcknowledgedWritesKept,
                            format!(
                                "record {} was acknowledged {:?} with fence {} but reads otherwise",
                                written.id, written.status, written.fence
                            ),
                            &[entry, &entries[read]],
                        );
                    }
                }
            }
            (Call::Enqueue { .. }, Reply::Jobs { jobs }) => {
                for job in jobs {
                    if let Some(read) = read_after(&last_job, jobs_purged, &job.id, entry) {
                        if matches!(&entries[read].reply, Reply::Jobs { jobs } if jobs.is_empty()) {
                            verdict.found(
                                Property::AcknowledgedWritesKept,
                                format!("enqueued job {} is gone", job.id),
                                &[entry, &entries[read]],
                            );
                        }
                    }
                }
            }
            (
                Call::Settle {
                    how: Settlement::Complete,
                    ..
                },
                Reply::Settles { settled },
            ) => {
                for job in settled.iter().flatten() {
                    // A purge may have removed the first, and the id been
                    // enqueued again.
                    let purged_since = jobs_purged.is_some_and(|purged| purged < entry.answered);
                    if let Some(&first) = completions.get(job.id.as_str()).filter(|_| !purged_since)
                    {
                        verdict.found(
                            Property::AcknowledgedWritesKept,
                            format!("job {} was completed twice, both acknowledged", job.id),
                            &[&entries[first], entry],
                        );
                    } else {
                        completions.insert(&job.id, index);
                    }
                    if let Some(read) = read_after(&last_job, jobs_purged, &job.id, entry) {
                        let kept = matches!(&entries[read].reply, Reply::Jobs { jobs }
                            if jobs.iter().any(|now| now.state == JobState::Completed
                                && now.fence == job.fence));
                        if !kept {
                            verdict.found(
                                Property::AcknowledgedWritesKept,
                                format!(
                                    "job {} was acknowledged completed with fence {} but reads \
                                     otherwise",
                                    job.id, job.fence
                                ),
                                &[entry, &entries[read]],
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
