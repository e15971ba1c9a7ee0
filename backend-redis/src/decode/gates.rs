//! Replies of the fence-gate scripts as typed outcomes, decoded here and
//! nowhere else; a reply of the wrong shape is
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt).

use redis::Value;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::limits::MAX_GATE_FENCE;
use tenure_lease_core::{FenceCheck, GateRecord, Result};

use super::{array, malformed, micros, text, unknown, Parts};

/// A fence a script answered, as decimal text.
fn fence(text: &str) -> Result<u64> {
    text.parse()
        .ok()
        .filter(|fence| (1..=MAX_GATE_FENCE).contains(fence))
        .ok_or_else(|| malformed(format_args!("bad gate fence {text:?}")))
}

/// `check_fence.lua` and `write_fenced.lua`: the answer to `presented`.
pub(crate) fn fence_check(reply: Value, presented: u64) -> Result<FenceCheck> {
    let (tag, mut parts) = Parts::of(reply)?;
    let highest = match tag.as_str() {
        "accepted" => presented,
        "stale" => {
            let highest = fence(&parts.text()?)?;
            if highest <= presented {
                return Err(malformed(format_args!(
                    "a stale answer to fence {presented} named {highest} as the highest"
                )));
            }
            highest
        }
        other => return Err(unknown(other)),
    };
    Ok(gate_rules::judge_fence(Some(highest), presented))
}

/// `highest_fence.lua`.
pub(crate) fn highest_fence(reply: Value) -> Result<Option<u64>> {
    let mut items = array(reply)?.into_iter();
    match (items.next(), items.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => fence(&text(value)?).map(Some),
        _ => Err(malformed("highest_fence answered more than one fence")),
    }
}

/// `list_fences.lua`, asked for the gates of `resources` (names as the
/// index holds them, in the order asked): those it found, in that order,
/// the ones gone since their names were read left out. A found gate whose
/// name is not UTF-8 is
/// [`undecodable`](gate_rules::undecodable_gate).
pub(crate) fn listed_gates(reply: Value, resources: &[Vec<u8>]) -> Result<Vec<GateRecord>> {
    let entries = array(reply)?;
    if entries.len() != resources.len() {
        return Err(malformed(format_args!(
            "list_fences answered {} entries for {} resources",
            entries.len(),
            resources.len()
        )));
    }
    let mut gates = Vec::with_capacity(entries.len());
    for (entry, name) in entries.into_iter().zip(resources) {
        let mut parts = array(entry)?.into_iter();
        let (stored_fence, stamp) = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => continue,
            (Some(stored_fence), Some(stamp), None) => (stored_fence, stamp),
            _ => return Err(malformed("a listed gate is not { fence, checked_at }")),
        };
        let resource = String::from_utf8(name.clone()).map_err(|_| {
            gate_rules::undecodable_gate(
                &String::from_utf8_lossy(name),
                "its resource name is not UTF-8",
            )
        })?;
        let fence = fence(&text(stored_fence)?)?;
        let stamp = text(stamp)?;
        let checked_at = micros(stamp.as_bytes())
            .ok_or_else(|| malformed(format_args!("bad gate check time {stamp:?}")))?;
        gates.push(GateRecord::new(resource, fence, checked_at));
    }
    Ok(gates)
}
