//! `--redis-floor`: Redis's baselines as the least a script can do on
//! tenure's own layout, run where the bare commands otherwise run: an
//! admission (the record hash, its holder key, the scope history, active
//! and expiry indexes, a fence drawn with its failover check) for `SET NX
//! PX`; for the compare-and-set, a fenced renewal (judge owner and fence,
//! write the expiry and its index), a transition to running (the same
//! judgement, the status written, the record answered whole) and an
//! adopting takeover (the lapse judged, a fence drawn, the new holder and
//! expiry written, the record answered whole); and a claim and a completion on the job
//! layout (a job hash, a ranked ready index, a claimed index, a fence, the
//! job answered whole) for `LMOVE` + `LREM`. Beside tenure's figures in
//! the same run they tell what the layout and the round trips cost from
//! what tenure's scripts add (validation, capabilities, the delayed index,
//! whole records in the answers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redis::{Script, Value};

use super::RawRedis;
use crate::backend::RawBaseline;
use crate::BenchResult;

/// The fence draw the admission and the claim share (see the file's
/// header).
const PRELUDE: &str = include_str!("floor_prelude.lua");

/// Admits a record on one free scope (see the file's header).
const ADMIT: &str = include_str!("floor_admit.lua");

/// Renews a record held by the caller (see the file's header).
const RENEW: &str = include_str!("floor_renew.lua");

/// Moves a record held by the caller to running (see the file's header).
const TRANSITION: &str = include_str!("floor_transition.lua");

/// Takes a lapsed record over (see the file's header).
const TAKEOVER: &str = include_str!("floor_takeover.lua");

/// Claims the best ready job (see the file's header).
const CLAIM: &str = include_str!("floor_claim.lua");

/// Completes a claimed job (see the file's header).
const COMPLETE: &str = include_str!("floor_complete.lua");

/// The claim's lease: longer than any run, so nothing lapses.
const TTL: Duration = Duration::from_secs(600);

/// The script floors, one per baseline.
pub(super) struct ScriptFloor {
    raw: RawRedis,
    admit: Script,
    renew: Script,
    transition: Script,
    take_over: Script,
    claim: Script,
    complete: Script,
    /// The fence each admitted record and claimed job was handed, by its
    /// key, for its renewals and its completion.
    fences: Mutex<HashMap<String, String>>,
}

impl ScriptFloor {
    pub(super) fn new(raw: RawRedis) -> Arc<Self> {
        Arc::new(ScriptFloor {
            raw,
            admit: Script::new(&format!("{PRELUDE}{ADMIT}")),
            renew: Script::new(RENEW),
            transition: Script::new(&format!("{PRELUDE}{TRANSITION}")),
            take_over: Script::new(&format!("{PRELUDE}{TAKEOVER}")),
            claim: Script::new(&format!("{PRELUDE}{CLAIM}")),
            complete: Script::new(COMPLETE),
            fences: Mutex::new(HashMap::new()),
        })
    }

    /// The prefix of the job hashes of `queue`: the key is it and the id.
    fn job_prefix(&self, queue: &str) -> String {
        format!("{}:", self.raw.key("floor-job", queue))
    }

    fn remember_fence(&self, key: String, fence: String) {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, fence);
    }

    /// The fence `key` was handed; with `forget`, never asked again.
    fn fence_of(&self, key: &str, forget: bool) -> BenchResult<String> {
        let mut fences = self.fences.lock().unwrap_or_else(PoisonError::into_inner);
        let fence = if forget {
            fences.remove(key)
        } else {
            fences.get(key).cloned()
        };
        fence.ok_or_else(|| format!("the floor never handed out {key}").into())
    }
}

/// The claim rank tenure's enqueue writes for a job of priority 0 made at
/// `micros`, before the id: 10 digits of priority, then `run_at` and
/// `created` as `p` and 19 digits each.
fn rank_prefix(micros: u128) -> String {
    format!("{:010}p{micros:019}p{micros:019}", i32::MAX)
}

#[async_trait]
impl RawBaseline for ScriptFloor {
    fn describe(&self) -> &'static str {
        "script floors on tenure's layout: admit, renew, transition, takeover, claim, complete"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let record = self.raw.key("floor-rec", key);
        let reply: Value = self
            .admit
            .key(&record)
            .key(self.raw.key("floor-holder", key))
            .key(self.raw.key("floor-scope", key))
            .key(self.raw.key("floor-index", "active"))
            .key(self.raw.key("floor-index", "expiry"))
            .key(self.raw.key("floor-fence", "counter"))
            .key(self.raw.key("floor-fence", "epoch"))
            .arg(key)
            .arg(owner)
            .arg(ttl.as_micros().to_string())
            .arg(serde_json::json!([key]).to_string())
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        match reply {
            Value::Int(0) => Ok(false),
            Value::Array(parts) => {
                let [fence, _now] = <[Value; 2]>::try_from(parts)
                    .map_err(|parts| format!("the floor's admission answered {parts:?}"))?;
                self.remember_fence(record, redis::from_redis_value(fence)?);
                Ok(true)
            }
            other => Err(format!("the floor's admission answered {other:?}").into()),
        }
    }

    /// Renews with the fence the floor's admission drew (`_fence` is the
    /// bare baseline's).
    async fn cas(&self, key: &str, owner: &str, _fence: u64, ttl: Duration) -> BenchResult<bool> {
        let record = self.raw.key("floor-rec", key);
        let fence = self.fence_of(&record, false)?;
        let reply: Value = self
            .renew
            .key(&record)
            .key(self.raw.key("floor-index", "expiry"))
            .arg(key)
            .arg(owner)
            .arg(fence)
            .arg(ttl.as_micros().to_string())
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        Ok(!matches!(reply, Value::Int(0)))
    }

    /// Moves the record to running with the fence the floor handed it
    /// (`_fence` and `_ttl` are the bare baseline's).
    async fn transition(
        &self,
        key: &str,
        owner: &str,
        _fence: u64,
        _ttl: Duration,
    ) -> BenchResult<bool> {
        let record = self.raw.key("floor-rec", key);
        let fence = self.fence_of(&record, false)?;
        let reply: Value = self
            .transition
            .key(&record)
            .arg(owner)
            .arg(fence)
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        Ok(matches!(reply, Value::Array(_)))
    }

    /// Takes the record over for `owner`, judging every lease the floor
    /// wrote lapsed (a grace of minus its ttl and a second) and
    /// remembering the fence drawn (`_fence` is the bare baseline's).
    async fn take_over(
        &self,
        key: &str,
        owner: &str,
        _fence: u64,
        ttl: Duration,
    ) -> BenchResult<bool> {
        let record = self.raw.key("floor-rec", key);
        let grace = ttl + Duration::from_secs(1);
        let reply: Value = self
            .take_over
            .key(&record)
            .key(self.raw.key("floor-index", "expiry"))
            .key(self.raw.key("floor-fence", "counter"))
            .key(self.raw.key("floor-fence", "epoch"))
            .arg(key)
            .arg(owner)
            .arg(format!("-{}", grace.as_micros()))
            .arg(ttl.as_micros().to_string())
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        let Value::Array(pairs) = reply else {
            return Ok(false);
        };
        let mut fence = None;
        for pair in pairs.chunks(2) {
            if let [name, value] = pair {
                if redis::from_redis_value::<String>(name.clone())? == "fence" {
                    fence = Some(redis::from_redis_value::<String>(value.clone())?);
                }
            }
        }
        let fence = fence.ok_or("the floor's takeover answered no fence")?;
        self.remember_fence(record, fence);
        Ok(true)
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        let micros = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
        let (now, rank) = (micros.to_string(), rank_prefix(micros));
        let (prefix, ready) = (self.job_prefix(queue), self.raw.key("floor-ready", queue));
        for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
            let mut pipeline = redis::pipe();
            for n in chunk {
                let id = format!("{queue}-{n}");
                pipeline
                    .cmd("HSET")
                    .arg(format!("{prefix}{id}"))
                    .arg(&[
                        ("queue", queue),
                        ("payload", &format!("{{\"n\":{n}}}")),
                        ("priority", "0"),
                        ("run_at", &now),
                        ("attempt", "0"),
                        ("max_attempts", "3"),
                        ("caps", "[]"),
                        ("state", "queued"),
                        ("fence", "0"),
                        ("created", &now),
                        ("updated", &now),
                    ])
                    .ignore()
                    .cmd("ZADD")
                    .arg(&ready)
                    .arg(0)
                    .arg(format!("{rank}{id}"))
                    .ignore();
            }
            let () = pipeline
                .query_async(&mut self.raw.connection.clone())
                .await?;
        }
        Ok(())
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        let reply: Value = self
            .claim
            .key(self.raw.key("floor-ready", queue))
            .key(self.raw.key("floor-fence", "counter"))
            .key(self.raw.key("floor-fence", "epoch"))
            .key(self.raw.key("floor-claimed", queue))
            .arg(self.job_prefix(queue))
            .arg(worker)
            .arg(TTL.as_micros().to_string())
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        let Value::Array(parts) = reply else {
            return Err(format!("the floor's claim answered {reply:?}").into());
        };
        let (id, fence) = match <[Value; 3]>::try_from(parts) {
            Ok([id, fence, _job]) => (
                redis::from_redis_value::<String>(id)?,
                redis::from_redis_value::<String>(fence)?,
            ),
            Err(parts) if parts.is_empty() => return Ok(None),
            Err(other) => return Err(format!("the floor's claim answered {other:?}").into()),
        };
        self.remember_fence(format!("{}{id}", self.job_prefix(queue)), fence);
        Ok(Some(id))
    }

    async fn complete_job(&self, queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let job = format!("{}{id}", self.job_prefix(queue));
        let fence = self.fence_of(&job, true)?;
        let reply: Value = self
            .complete
            .key(&job)
            .key(self.raw.key("floor-claimed", queue))
            .key(self.raw.key("floor-finished", queue))
            .arg(id)
            .arg(worker)
            .arg(fence)
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        Ok(matches!(reply, Value::Array(_)))
    }

    fn describe_batch(&self) -> &'static str {
        "the script floor's claim and completion, once per job"
    }
}
