//! Replies of the fence-gate scripts as typed outcomes, decoded here and
//! nowhere else; a reply of the wrong shape is
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt).

use redis::Value;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::limits::MAX_GATE_FENCE;
use tenure_lease_core::{FenceCheck, Result};

use super::{array, malformed, text, unknown, Parts};

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
