//! # backend-postgres
//!
//! A [`LeaseStore`](tenure_lease_core::LeaseStore) and
//! [`JobQueue`](tenure_lease_core::JobQueue) on PostgreSQL (12 or newer), through
//! sqlx with runtime-checked queries: building it needs no database.
//! Through the facade it is `tenure::postgres::PgStore` (feature
//! `postgres`), also opened by
//! `tenure::connect("postgres://app@db/jobs?schema=tenure")`.
//!
//! ## Connecting
//!
//! From a URL, with [`PgStoreConfig`] (its `Debug` redacts the password):
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_postgres::{PgStore, PgStoreConfig};
//! use tenure_lease_core::{AdmitRequest, LeaseStore};
//!
//! let config = PgStoreConfig::new("postgres://app:secret@db.internal:5432/jobs")
//!     .schema("tenure")
//!     .max_connections(8);
//! let store = PgStore::connect(config).await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("nightly-report", "worker-a").scope("cron:report").ttl(Duration::from_secs(30)))
//!     .await?;
//! println!("{}", admission.label());
//! # Ok(()) }
//! ```
//!
//! or on a pool the application already has:
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> tenure_lease_core::Result<()> {
//! use tenure_backend_postgres::PgStore;
//!
//! let pool = sqlx::PgPool::connect("postgres://app@db.internal/jobs")
//!     .await
//!     .expect("connect");
//! let store = PgStore::from_pool(pool, "tenure").await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! ## Schema
//!
//! All tables live in one schema (default [`DEFAULT_SCHEMA`]), created when
//! missing. Its name must be a plain identifier (checked, then quoted); every
//! statement names it explicitly, so the pool's `search_path` does not
//! matter, and several independent stores can share one database.
//!
//! * `leases`: one row per record (`timestamptz` times, `jsonb` metadata,
//!   `status` text with a `CHECK`; migration 0014 adds `slots`, a `jsonb`
//!   object from each counted scope to the slot the record holds there,
//!   NULL for a record with exclusive scopes only);
//! * `lease_scopes`: every (scope, record) pair, for `list_by_scope`: it
//!   names the scope, so a counted scope's listing has every slot's records;
//! * `held_scopes(scope PRIMARY KEY, lease_id)`: one row per key held by an
//!   active record, created with the record and deleted in the same
//!   statement that deactivates it. Its primary key is the "one active record
//!   per key" rule, enforced by the server itself; each deletion notifies
//!   the scope's release (migration 0009, [Release notices](#release-notices)).
//!   Since migration 0014 the column holds keys
//!   ([`rules::slot_key`](tenure_lease_core::backend::rules::slot_key)):
//!   the scope itself for an exclusive scope and for slot 0 of a counted
//!   one, else the scope, U+001F and the slot number, so the keys of one
//!   scope are one index range (see [Counted scopes](#counted-scopes)).
//!   Until migration 0010 foreign keys tied both side tables to `leases`;
//!   they guarded rules every statement keeps by construction (and the kit
//!   checks on every run) at a quarter of an admission's cost, and are gone;
//! * `jobs`: one row per job (`jsonb` payload, `text[]` required
//!   capabilities, `state` and `dead_reason` text with `CHECK`s), with
//!   partial indexes for claiming (a queue's queued jobs, best first),
//!   reaping (claimed jobs by expiry) and listing dead letters, and
//!   (migration 0004) one of finished jobs by finish time for `purge_jobs`;
//!   migration 0006 adds the take-back trace (`taken_back`,
//!   `taken_back_at`) and indexes interrupted records for `purge` with the
//!   terminal ones; migration 0011 adds `progress` (to `leases` too);
//!   migration 0012 adds a job's uniqueness (`unique_key`, `unique_policy`
//!   with a `CHECK`, and `unique_until`, the end of a `for_period` key: the
//!   period is `unique_until - created_at`, and `purge_jobs` keeps the job
//!   until then), all NULL for a job without a key, with a partial index
//!   on `(queue, unique_key)` for `enqueue_unique`. Enqueues of one key
//!   take turns on a transaction-scoped advisory lock per (queue, key),
//!   hashed like the scope locks below but in a family of its own.
//!   Purging a lease deletes its `lease_scopes` rows in the same
//!   statement; scope locks are transaction-scoped advisory locks, so no
//!   row is kept per scope;
//! * `rate_logs` (migration 0013): one row per rate log
//!   ([`RateLimit`](tenure_lease_core::rate::RateLimit): key, permits and
//!   `period_ms` its primary key), written at its first use: `uses`, the
//!   instants of its last uses (microseconds since the Unix epoch, a
//!   `bigint[]`, ascending, at most `permits`), and `ends_at`, when the
//!   newest stops counting, indexed for `purge`, which deletes the logs
//!   that ended (uncounted). Callers of one log take turns on a
//!   transaction-scoped advisory lock per log, hashed like the scope
//!   locks but in a family of its own, so a log needs no row to be locked
//!   (see [Rate limits](#rate-limits));
//! * `fence_seq`: the store-wide fence sequence, drawn by admissions,
//!   takeovers, job claims and take-backs alike, through `draw_fence()`,
//!   or `draw_fences(n)` for a claim of many jobs (migrations 0008 and
//!   0010): every fence is above the floor of the
//!   server's WAL timeline (the timeline times 2^40; the first draw on a
//!   new timeline moves the sequence past it, through the schema owner's
//!   `next_fence()`), so a standby promoted while it lagged (a new
//!   timeline) still hands out fences above every fence of the old
//!   primary, and a fence never repeats;
//! * `admit_if_free(...)`: the admission's first step, or all of it (see
//!   [Admissions](#admissions-one-at-a-time-per-scope)); migration 0007
//!   makes its holder read index lookups on every plan (it was one
//!   sequential scan of `leases` per admission); `admit_counted(...)`
//!   (migration 0014) is the same for an admission with counted scopes
//!   (see [Counted scopes](#counted-scopes));
//! * `fence_gates` (migration 0005): one row per fence gate
//!   ([`FenceStore`](tenure_lease_core::FenceStore)), the highest fence
//!   accepted and when it last was, indexed by that time for
//!   `purge_fences`; its primary key (`COLLATE "C"`) lists them in byte
//!   order of their names for `list_fences`. [`PgStore::check_fence_in`]
//!   runs the check inside a transaction of the caller's, so a write to the
//!   caller's own tables and the gate commit together.
//!
//! ## Connecting and its errors
//!
//! [`PgStore::connect`] opens its first connection at once, within
//! [`PgStoreConfig::acquire_timeout`]: a server nobody answers for is
//! [`ErrorKind::Unavailable`] (retryable) naming the address, database and
//! user (never the password) and the cause (`connection refused`, no
//! answer in time); an unknown database or role, a refused login or a
//! missing privilege is [`ErrorKind::Config`], not worth retrying. Before
//! that connection a short probe sends PostgreSQL's opening request and
//! reads its one-byte answer: a server at the port that speaks another
//! protocol (Redis at 6379 stays silent) is refused within 2 s, or at
//! once when it answers something no PostgreSQL server sends, instead of
//! holding the connect for the whole acquire timeout.
//!
//! ## Migrations
//!
//! The schema is versioned with embedded sqlx migrations
//! (`backend-postgres/migrations`), applied by [`PgStore::connect`] and
//! [`PgStore::from_pool`] (in the default [`MigrationMode::Apply`]), or by
//! [`PgStore::apply_migrations`] alone, on a dedicated connection whose
//! `search_path` is the schema; the versions applied are kept in the
//! schema's own `_sqlx_migrations` table. sqlx takes a PostgreSQL advisory lock around the
//! run (one lock per database, so runs on different schemas take turns too),
//! and schema creation is serialised the same way, so any number of workers
//! may start at once: one applies, the others wait and find nothing left to
//! do. A schema written by a newer version of
//! this crate (unknown or modified migrations) answers
//! [`ErrorKind::Incompatible`].
//!
//! ## Least privilege
//!
//! Applying migrations needs a role that may create the schema (`CREATE` on
//! the database) or owns it. The application need not be that role: apply
//! the migrations at deployment with an admin role, then connect the
//! application with [`MigrationMode::VerifyOnly`], which changes nothing and
//! answers [`ErrorKind::Incompatible`] naming the first migration the schema
//! lacks (and how to apply it) when it is behind:
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> tenure_lease_core::Result<()> {
//! use tenure_backend_postgres::{MigrationMode, PgStore, PgStoreConfig};
//!
//! // At deployment, as the schema's owner:
//! PgStore::apply_migrations(&PgStoreConfig::new("postgres://admin@db/jobs").schema("tenure"))
//!     .await?;
//! // In the application, as a role with only the grants below:
//! let store = PgStore::connect(
//!     PgStoreConfig::new("postgres://app@db/jobs")
//!         .schema("tenure")
//!         .migrations(MigrationMode::VerifyOnly),
//! )
//! .await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! ([`PgStore::from_pool_with_migrations`] does the same on a pool.) The
//! application role needs exactly these grants, given by the schema's
//! owner after the migrations ran (again after an upgrade adds tables or
//! functions: migration 0010 adds `draw_fence()` and `draw_fences(bigint)`,
//! which fenced writes call; migration 0013 the `rate_logs` table and the
//! three functions rate-limited calls use; migration 0014 `admit_counted`,
//! which admissions with counted scopes call):
//!
//! ```sql
//! GRANT USAGE ON SCHEMA tenure TO app;
//! GRANT SELECT, INSERT, UPDATE, DELETE
//!     ON tenure.leases, tenure.lease_scopes, tenure.held_scopes, tenure.jobs,
//!        tenure.fence_gates, tenure.rate_logs TO app;
//! GRANT SELECT ON tenure._sqlx_migrations TO app;
//! GRANT USAGE ON SEQUENCE tenure.fence_seq TO app;
//! GRANT EXECUTE ON FUNCTION tenure.admit_if_free(bigint[], text, text[], text, text,
//!     interval, jsonb, boolean), tenure.draw_fence(), tenure.draw_fences(bigint),
//!     tenure.next_fence(), tenure.timeline_floor(), tenure.wal_timeline(),
//!     tenure.admit_if_free_limited(bigint[], text, text[], text, text, interval, jsonb,
//!       boolean, bigint, text, integer, bigint, bigint, bigint),
//!     tenure.lock_rate_log(bigint, text, integer, bigint, bigint, bigint),
//!     tenure.spent_rate_log(bigint[], integer, bigint, timestamptz, bigint, bigint),
//!     tenure.admit_counted(bigint[], text, text[], integer[], integer[], text, text,
//!       interval, jsonb, boolean, bigint, text, integer, bigint, bigint, bigint) TO app;
//! ```
//!
//! (`EXECUTE` on functions is granted to `PUBLIC` by default; the grant
//! matters where that default was revoked. `pg_advisory_xact_lock`,
//! `pg_current_wal_lsn` and `pg_walfile_name` must stay executable, as they
//! are by default.)
//!
//! ## Isolation levels
//!
//! Every statement is written for `READ COMMITTED`, and every operation
//! answers the same at any session default: a pool option, role or
//! database setting of `default_transaction_isolation = 'repeatable read'`
//! or `'serializable'` changes nothing a caller sees. A statement runs on
//! its own first; one that answers a serialization failure (SQLSTATE
//! 40001, which rolled it back whole) runs once more inside
//! `BEGIN ISOLATION LEVEL READ COMMITTED`, where none can occur.
//! Admissions run their transactions at `READ COMMITTED` explicitly (see
//! below). Only the second run costs anything, and only above
//! `READ COMMITTED`.
//!
//! ## TLS and authentication
//!
//! Connections are encrypted with rustls as the URL says, in libpq's words:
//! `sslmode=require` encrypts, `verify-ca` checks the server's certificate
//! against `sslrootcert=/path/ca.pem` (or the system's trust store),
//! `verify-full` its host name too; `sslcert=` and `sslkey=` present a
//! client certificate. [`PgStoreConfig::tls`] (or the `tls_ca=`,
//! `tls_cert=`, `tls_key=` parameters every tenure backend takes) gives the
//! certificates from code and always verifies in full:
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> tenure_lease_core::Result<()> {
//! use tenure_backend_postgres::{PgStore, PgStoreConfig};
//! use tenure_lease_core::tls::TlsCertificates;
//!
//! let ca = std::fs::read("/etc/tenure/db-ca.pem").expect("the CA file");
//! let store = PgStore::connect(
//!     PgStoreConfig::new("postgres://app:secret@db.internal:5432/jobs")
//!         .tls(TlsCertificates::new().trust_pem(ca)),
//! )
//! .await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! A refused handshake (an untrusted or misnamed certificate, a server
//! without `ssl = on` under `sslmode=require`) is [`ErrorKind::Config`],
//! saying what to check. The user and password come from the URL (any
//! method the server asks for: SCRAM, md5, trust, certificate).
//!
//! ## Standbys and failover
//!
//! [`PgStore::connect`] refuses a standby (`pg_is_in_recovery()`) with
//! [`ErrorKind::Config`]: it would refuse every write. A server demoted
//! after connect answers each write with SQLSTATE 25006, reported as a
//! retryable [`ErrorKind::Unavailable`] that says the server is read-only,
//! for an address that follows the primary through failovers.
//!
//! Fences survive a promotion (they are drawn on the WAL timeline, see
//! [Schema](#schema)); the store's fence gates are what the standby had
//! received. [`PgStoreConfig::refuse_fences_from_before_failover`] has them
//! refuse every fence drawn before the last promotion, so no deposed owner
//! is accepted even when the successor's gate write was lost.
//! [`PgStoreConfig::require_synchronous_standby`] (`?require_synchronous_standby=true`
//! through `tenure::connect`) acknowledges a write only once a synchronous
//! standby has it: every connection commits with `synchronous_commit =
//! on`, and a server whose `synchronous_standby_names` is empty is refused
//! at connect with [`ErrorKind::Incompatible`].
//! [`PgStore::server_settings`] reads what a crash or a failover may lose
//! (`fsync`, `synchronous_commit`, `synchronous_standby_names`, the
//! streaming standbys), as `tenure check` reports it.
//!
//! ## Time
//!
//! Every expiry decision is judged by the server's clock alone: `now()`
//! inside the statement or transaction that acts on it (one instant per
//! operation; an admission, an enqueue with uniqueness keys and a claim
//! with a rate limit read `clock_timestamp()` after their lock waits, and
//! an admission that interrupts holders stamps them at the instant it judged
//! them), never the worker's clock. [`LeaseStore::now`](tenure_lease_core::LeaseStore::now) answers
//! `SELECT now()`, microsecond precision like every stored timestamp.
//!
//! ## Atomicity and errors
//!
//! Every operation is one statement or one transaction (or a conditional
//! write and, when it was refused, the read that says why). Job claims and the
//! reaper pick their rows with `FOR UPDATE SKIP LOCKED`: concurrent claimers
//! on any number of pools or hosts never share a job and never wait on one
//! another; one claim's fences ascend in claim order. A dropped connection
//! or a server error mid-transaction rolls the whole transaction back and
//! answers a retryable error
//! ([`Error::is_retryable`](tenure_lease_core::Error::is_retryable)): the outcome is
//! unknown to the caller, but nothing is half-applied.
//!
//! ## Timeouts
//!
//! Every [`LeaseStore`](tenure_lease_core::LeaseStore),
//! [`JobQueue`](tenure_lease_core::JobQueue) and
//! [`FenceStore`](tenure_lease_core::FenceStore) call is bounded as a whole (waiting
//! for a connection, each statement, any retries) by
//! [`PgStoreConfig::operation_timeout`] (default
//! [`DEFAULT_OPERATION_TIMEOUT`]); past it the call answers
//! [`ErrorKind::Timeout`], outcome unknown.
//! Running out of time drops the call's future, and with it sqlx's work in
//! progress:
//!
//! * an open transaction (an admission) is never committed: dropping it
//!   queues a `ROLLBACK` on its connection;
//! * the connection, perhaps cut mid-statement, goes back to the pool only
//!   after sqlx has flushed what was queued (the `ROLLBACK`) and read every
//!   reply still owed up to the server's next `ReadyForQuery`; if that
//!   fails the connection is closed instead, so no later call inherits a
//!   half-read reply or an open transaction. While the server stays
//!   silent that check waits too, keeping the connection's place in the
//!   pool (later calls then answer `Timeout` as well); if the session ends
//!   instead, the server rolls the transaction back itself. Its locks stay
//!   held on the server until one or the other happens:
//!   `idle_in_transaction_session_timeout` and TCP keepalives on the
//!   server bound that.
//!
//! ## Round trips
//!
//! An operation that is one statement costs one network round trip:
//! admitting into free scopes (or free slots of counted scopes), renewing,
//! a transition, a takeover, a read, a claim, a settlement, a gate check
//! (an admission or a claim with a rate
//! limit too). sqlx's pool would add two: a ping
//! when a connection is taken (`test_before_acquire`) and another when it
//! comes back, to flush what a cancelled statement may have left. So the
//! store keeps the connections its statements finished with in good order
//! and sends its next statement on one of them, unchecked; a connection
//! cut mid-statement, or whose session the server ended, goes back to the
//! pool and through its check as before. The store's statements wait for
//! a connection in a queue of their own (as many at once as the pool's
//! bound), where a kept connection reaches the next in line.
//!
//! A kept connection goes back to the pool once unused for a quarter of a
//! second (so within half a second), and after a second out of it however
//! busy the store: the application's own statements on
//! [`PgStore::pool`] wait at most about that long for one the store holds.
//! The pools [`PgStore::connect`] opens ping a connection only when it sat
//! idle in them for a second or more (a pool given to
//! [`PgStore::from_pool`] keeps its own settings). So after a server
//! restart or a failover, a call on a kept or recently used connection
//! answers [`ErrorKind::Unavailable`] (retryable) once, where the ping
//! would have replaced the connection unseen; on a server that fell silent
//! it answers [`ErrorKind::Timeout`] after the operation timeout (rather
//! than after the connection wait, as a failed ping would). An admission
//! that interrupts holders, an enqueue of jobs with uniqueness keys (its
//! locks, one read, the insert), and a statement run again at
//! `READ COMMITTED`, is a transaction on the same connection: a round trip
//! per statement.
//!
//! ## Release notices
//!
//! Migration 0009 puts a trigger on `held_scopes`: every deleted row (a
//! scope or a slot freed, or a row that held nothing dropped by an
//! admission) notifies the schema's channel (`tenure_released_` and the
//! md5 of the schema's name) with the scope (a slot's key without its slot,
//! since migration 0014), delivered at commit.
//! [`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases), which
//! a [`Waiter`](tenure_lease_core::wait::Waiter) subscribes through, opens
//! one connection per store outside its pool at its first call and
//! `LISTEN`s there; a connection lost, or silent for ten seconds and then
//! deaf to a `SELECT 1`, is replaced and announced as missed notices;
//! [`PgStore::close`] stops it. The notification costs a release one more
//! step at commit, where PostgreSQL takes turns between notifying
//! transactions of the database. Notices wait in the server's queue (8 GB)
//! until every listener of the database has read them: a listening session
//! that stops reading (a process frozen with its connection open) lets it
//! fill, and at full a release fails; `pg_notification_queue_usage()`
//! shows how full it is. `LISTEN` needs no privilege: any role that can
//! connect can hear the scope names. Behind a pooler in transaction mode
//! (PgBouncer) notices are never delivered: waiters then poll once a
//! second.
//!
//! ## Admissions: one at a time per scope
//!
//! `admit` looks before it writes, so two overlapping admissions deciding
//! side by side would both see the scopes free (or the same holder
//! interruptible), and one of them would lose at the write. Instead,
//! admissions on a scope take turns, and each sees what the one before it
//! committed. The schema's `admit_if_free` function (a PL/pgSQL function,
//! so each of its statements takes a fresh snapshot under `READ COMMITTED`)
//!
//! 1. takes a transaction-scoped advisory lock (`pg_advisory_xact_lock`)
//!    per requested scope, in ascending key order, before it touches any
//!    row. The key is FNV-1a 64 over the schema name, a `0xFF` byte and the
//!    scope, derived by this crate; stores in other schemas never wait on
//!    it, and a colliding pair of scopes merely takes turns;
//! 2. reads the active holders of the scopes, then its instant
//!    (`clock_timestamp()`, after every wait, so never earlier than a
//!    scope's previous holder was released);
//! 3. if the id is free and nothing holds the scopes, inserts the record
//!    and its `held_scopes` rows (first dropping any row of the scopes
//!    whose record is gone, finished or no longer names the scope: one
//!    left by a record deleted or finished by hand holds nothing);
//!    otherwise answers the holders (or that the id is taken) and writes
//!    no row (a `taken` answer may have used up a fence value).
//!
//! Most admissions are that one call, in a transaction of its own: one
//! round trip admits, and one answers a conflict, judged by
//! [`tenure_lease_core::backend::rules::plan_admission`] on the holders it read (they held
//! the scopes at that instant). An admission that interrupts holders calls
//! the function again inside a `READ COMMITTED` transaction, asking it to
//! lock the holders (`FOR UPDATE`, records only, in id order) until the
//! end; decides on them; interrupts them (each drawing a new fence, in the
//! order the answer lists them, whatever order the table keeps them in); and
//! calls it once more, which now finds the scopes free and admits, with a
//! fence above theirs. In a session whose default isolation level is
//! higher, where one snapshot serves every statement, the function refuses
//! to decide and every admission takes the transactional path.
//!
//! Since an admission waits only for locks of higher keys than those it
//! holds, and for records (in id order) only once it holds all its scope
//! locks, admissions cannot deadlock on one another, and each sees all that
//! the overlapping admissions before it committed: none trips on another's
//! `held_scopes` row.
//!
//! `renew`, `transition` and `claim_for_takeover` take no scope lock, and
//! need none: each is one statement that locks one record and updates it
//! before deleting that record's `held_scopes` rows, which nothing else
//! locks (an admission drops rows that hold nothing, of records gone or
//! finished, under its scope locks). Once it holds that record it waits for nothing, so it cannot close
//! a cycle with an admission; an admission waiting for the record re-reads
//! it when the statement commits, and drops it if it was released.
//!
//! `renew_many` locks all its records in one statement, in id order like
//! an admission, before it writes any: it and an admission (or another
//! batch) wait for one another in that one order, never in a cycle.
//!
//! What can still spoil an attempt (a deadlock with a transaction that
//! locks records in another order, such as another application; an older
//! version of this crate, which takes no scope locks, admitting on the same
//! schema) is retried, at most three attempts in all.
//! Then the admission answers `Conflict` with a holder of its scopes if
//! there is one, and otherwise decides once more under the locks. Each
//! decision taken again is counted
//! ([`tenure_lease_core::backend::telemetry::admit_retried`], label
//! `backend="postgres"`).
//!
//! ## Counted scopes
//!
//! An admission with counted scopes
//! ([`AdmitRequest::counted_scope`](tenure_lease_core::AdmitRequest::counted_scope))
//! calls the schema's `admit_counted` function (migration 0014) in place of
//! `admit_if_free`, in the same ways (on its own, or in the interrupting
//! transaction), and with a rate limit if it has one. It takes the same
//! advisory locks, one per requested scope NAME (the key of slot 0): every
//! admission touching any slot of a scope, exclusive ones included, takes
//! turns on that one lock, so the slots of a scope are chosen one
//! admission at a time, each seeing what the one before committed, and
//! racing admissions never hold more slots than their capacity. Under the
//! locks, for each counted scope, the function reads the active holders of
//! its slots below the request's capacity (one range of the `held_scopes`
//! index, then their records by id) and contends for the lowest free slot;
//! if it and every other key it contends for are free, it admits, in the
//! same one round trip as a plain admission, writing the record's `slots`
//! and the keys it holds. When a scope is full it answers every holder of
//! its slots, and the crate chooses the slot with
//! [`rules::choose_slot`](tenure_lease_core::backend::rules::choose_slot)
//! and plans with
//! [`rules::plan_admission`](tenure_lease_core::backend::rules::plan_admission):
//! a conflict names the holder of the chosen slot (the one that frees
//! first). An admission that interrupts decides again in its transaction,
//! on the holders it locked, interrupts the chosen slot's holder alone,
//! and calls the function with the slots it decided, which it then
//! contends for. Holders of the other slots are read (and, in that
//! transaction, locked) but never written. The plain admission (no
//! counted scope) is untouched: `admit_if_free` holds each scope as slot
//! 0, the scope itself, as before.
//!
//! A record whose `slots` is not an object mapping scopes it names to
//! slot numbers that fit a `u32` is [`ErrorKind::Corrupt`] to every read,
//! and to an admission that must judge it.
//!
//! ## Rate limits
//!
//! An admission or a claim with a rate limit is still one statement, and
//! the limit is judged in it, by the server, with the rules of
//! [`tenure_lease_core::backend::rate_rules`] written in SQL (migration
//! 0013). Its log is locked by the schema's `lock_rate_log` function: it
//! takes the log's advisory lock (FNV-1a 64 over the schema name, `0xFF`,
//! `0xFD` and the log's name, [`rate_rules::log_name`]), then reads its
//! instant (`clock_timestamp()`, after the wait) and the log with a fresh
//! snapshot, so callers of one log take turns and each sees the uses the
//! one before it committed: together they never use more than its
//! permits.
//!
//! * An admission calls `admit_if_free_limited`, `admit_if_free` with the
//!   limit: the id and the scopes are judged first, as always (a taken id
//!   and a blocking holder use no permit); only then is the log locked, and
//!   the record admitted at the log's instant with one use written, or,
//!   with no permit left, nothing written and
//!   [`Admission::RateLimited`](tenure_lease_core::Admission::RateLimited)
//!   answered. An admission that interrupts judges the limit in the call
//!   after the interruptions, in the same transaction, which rolls back
//!   when no permit is left: the holders stay as they were.
//! * A claim locks the log first, then claims at the log's instant at most
//!   as many jobs as permits are left (looking for one more, to tell
//!   whether the limit held one back) and writes a use per job, in one
//!   statement. Its jobs are read as the statement found them before its
//!   lock wait; a job claimed meanwhile is skipped, as in any claim.
//!
//! A log the server cannot read as at most `permits` instants (a null, a
//! second dimension, a value outside the instants the crate represents,
//! too many uses) stops the call before it writes anything, and the crate
//! answers [`ErrorKind::Corrupt`] with the reason
//! [`rate_rules::stored_uses`] gives. Rate-limited calls are judged at
//! `READ COMMITTED`: in a session whose default is higher the admission
//! takes its transactional path, and the claim answers a serialization
//! failure that runs it again at `READ COMMITTED` (see
//! [Isolation levels](#isolation-levels)). The plain admission and claim
//! are untouched: no lock, no read of `rate_logs`.
//!
//! [`rate_rules::log_name`]: tenure_lease_core::backend::rate_rules::log_name
//! [`rate_rules::stored_uses`]: tenure_lease_core::backend::rate_rules::stored_uses
//! [`LeaseStore::now`](tenure_lease_core::LeaseStore::now): tenure_lease_core::LeaseStore::now

mod config;
mod decode;
mod error;
mod gate;
mod lease;
mod queue;
mod rate;
mod releases;
mod scope_locks;
mod server;
mod sql;
mod statement;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, Row};
use tenure_lease_core::{Error, ErrorKind, Result};
use tenure_sql_sessions::Sessions;

pub use config::{
    MigrationMode, PgStoreConfig, DEFAULT_OPERATION_TIMEOUT, DEFAULT_SCHEMA, URL_PARAMETERS,
    URL_SCHEMES,
};
pub use server::ServerSettings;
/// The sqlx this crate runs on, for the transactions
/// [`PgStore::check_fence_in`] checks in.
pub use sqlx;

use config::SchemaName;
use error::{migrate_error, store_error};
use scope_locks::ScopeLocks;
use sql::Statements;
use tenure_lease_core::release::ReleaseListener;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Advisory-lock key serialising `CREATE SCHEMA IF NOT EXISTS` between
/// workers (two concurrent creations of one schema can otherwise fail).
const SCHEMA_CREATION_LOCK: i64 = 0x7465_6e75_7265_0001;

/// The PostgreSQL lease store. Cloning shares the pool.
#[derive(Clone)]
pub struct PgStore {
    sessions: Sessions<Postgres>,
    schema: SchemaName,
    sql: Arc<Statements>,
    scope_locks: ScopeLocks,
    operation_timeout: Duration,
    /// See [`PgStore::refusing_fences_from_before_failover`].
    gates_refuse_earlier_timelines: bool,
    releases: ReleaseListener,
}

impl tenure_lease_core::backend::stores::Backend for PgStore {
    const NAME: &'static str = "PostgreSQL";
    const SYSTEM: &'static str = "postgresql";

    fn time_limit(&self) -> Option<Duration> {
        Some(self.operation_timeout)
    }
}

tenure_lease_core::serve_backend!(PgStore);

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.schema.as_str())
            .field("pool_size", &self.pool().size())
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects a pool as `config` says (a [`PgStoreConfig`], or a URL
    /// with the defaults: `PgStore::connect("postgres://app@db/jobs")`), prepares the schema as its
    /// [`MigrationMode`] says (by default: creates and migrates it), and
    /// answers the store.
    ///
    /// One connection is opened at once, within
    /// [`PgStoreConfig::acquire_timeout`], so a server that cannot be
    /// reached answers at once, with its address and the cause.
    ///
    /// # Errors
    ///
    /// A bad URL (one naming no server among them: `postgres://` alone
    /// would reach whatever the local socket serves, as the operating
    /// system's user) or schema name, an unknown database or role, a refused
    /// login or a missing privilege is [`ErrorKind::Config`]; an
    /// unreachable or silent server is [`ErrorKind::Unavailable`]
    /// (retryable); a schema that lacks migrations this version needs
    /// (under [`MigrationMode::VerifyOnly`]) or carries migrations it does
    /// not know is [`ErrorKind::Incompatible`].
    pub async fn connect(config: impl Into<PgStoreConfig>) -> Result<Self> {
        let config = config.into();
        let schema = SchemaName::parse(config.schema_name())?;
        let options = config.connect_options()?;
        let first = open_session(&options, config.connection_wait()).await?;
        let mut pool = PgPoolOptions::new()
            .max_connections(config.connection_limit())
            .acquire_timeout(config.connection_wait())
            .test_before_acquire(false)
            .before_acquire(tenure_sql_sessions::ping_if_idle::<Postgres>);
        if config.requires_synchronous_standby() {
            pool = pool.after_connect(|session, _| {
                Box::pin(async move {
                    sqlx::query(AT_LEAST_SYNCHRONOUS_COMMIT)
                        .execute(session)
                        .await
                        .map(drop)
                })
            });
        }
        let pool = pool.connect_lazy_with(options);
        let mut store =
            Self::on_pool(pool, schema).with_operation_timeout(config.operation_limit());
        if config.refuses_fences_from_before_failover() {
            store = store.refusing_fences_from_before_failover();
        }
        // Before any migration: a refused server is left as it was.
        if config.requires_synchronous_standby() {
            store.refuse_asynchronous_replication().await?;
        }
        store.prepare_on(first, config.migration_mode()).await?;
        Ok(store)
    }

    /// Uses an existing pool, keeping the records in `schema`, created and
    /// migrated if needed. The pool's `search_path` is left alone. Each
    /// operation may take [`DEFAULT_OPERATION_TIMEOUT`]; see
    /// [`with_operation_timeout`](Self::with_operation_timeout).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn from_pool(pool: PgPool, schema: &str) -> Result<Self> {
        Self::from_pool_with_migrations(pool, schema, MigrationMode::Apply).await
    }

    /// [`from_pool`](Self::from_pool), preparing the schema as `mode` says:
    /// [`MigrationMode::VerifyOnly`] for a pool whose role may not change
    /// the schema.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn from_pool_with_migrations(
        pool: PgPool,
        schema: &str,
        mode: MigrationMode,
    ) -> Result<Self> {
        let store = Self::on_pool(pool, SchemaName::parse(schema)?);
        let session = store.dedicated_session().await?;
        store.prepare_on(session, mode).await?;
        Ok(store)
    }

    /// Creates the schema `config` names if missing and applies the
    /// migrations it lacks, then disconnects: run it at deployment with a
    /// role that may create the schema and its objects, and let the
    /// application connect with [`MigrationMode::VerifyOnly`] as a role
    /// holding only the grants the crate docs list
    /// ([Least privilege](crate#least-privilege)). Idempotent, and safe to
    /// run from many processes at once. `config`'s migration mode is
    /// ignored.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); a role without the privileges the
    /// migrations need is [`ErrorKind::Config`].
    pub async fn apply_migrations(config: &PgStoreConfig) -> Result<()> {
        let schema = SchemaName::parse(config.schema_name())?;
        let options = config.connect_options()?;
        let mut session = open_session(&options, config.connection_wait()).await?;
        let outcome = migrate_on(&mut session, &schema).await;
        // Closing can only fail if the session is already gone.
        let _ = session.close().await;
        outcome
    }

    fn on_pool(pool: PgPool, schema: SchemaName) -> Self {
        PgStore {
            sql: Arc::new(Statements::new(&schema)),
            scope_locks: ScopeLocks::for_schema(schema.as_str()),
            sessions: Sessions::new(pool),
            schema,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            gates_refuse_earlier_timelines: false,
            releases: ReleaseListener::new(),
        }
    }

    /// A connection with the pool's settings that is not the pool's: the
    /// migrator sets its `search_path`, and the session (with any advisory
    /// lock a failed run left) ends with it.
    async fn dedicated_session(&self) -> Result<PgConnection> {
        let pool = self.pool();
        open_session(
            &pool.connect_options(),
            pool.options().get_acquire_timeout(),
        )
        .await
    }

    /// Migrates or verifies the schema on `session` as `mode` says, then
    /// closes it.
    async fn prepare_on(&self, mut session: PgConnection, mode: MigrationMode) -> Result<()> {
        let outcome = match refuse_standby(&mut session).await {
            Err(refused) => Err(refused),
            Ok(()) => match mode {
                MigrationMode::Apply => migrate_on(&mut session, &self.schema).await,
                MigrationMode::VerifyOnly => verify_on(&mut session, &self.schema).await,
            },
        };
        // Closing can only fail if the session is already gone.
        let _ = session.close().await;
        outcome
    }

    /// Creates the schema if missing and applies the migrations it lacks.
    /// Idempotent, and safe to run from many workers at once.
    ///
    /// # Errors
    ///
    /// As [`apply_migrations`](Self::apply_migrations).
    pub async fn migrate(&self) -> Result<()> {
        let session = self.dedicated_session().await?;
        self.prepare_on(session, MigrationMode::Apply).await
    }

    /// The store with its fence gates ([`FenceStore`](tenure_lease_core::FenceStore),
    /// [`check_fence_in`](Self::check_fence_in)) refusing every fence drawn
    /// before the server's last promotion, as
    /// [`PgStoreConfig::refuse_fences_from_before_failover`] describes.
    pub fn refusing_fences_from_before_failover(mut self) -> Self {
        self.gates_refuse_earlier_timelines = true;
        self
    }

    /// The store with each whole operation bounded by `timeout`, as
    /// [`PgStoreConfig::operation_timeout`] describes.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The pool the store runs on. The store keeps the connections its
    /// statements used for its next ones, out of the pool, while it is busy;
    /// each goes back to the pool within half a second of not being needed,
    /// and after a second out of it however busy the store (see the crate
    /// docs).
    pub fn pool(&self) -> &PgPool {
        self.sessions.pool()
    }

    /// The schema holding the records.
    pub fn schema(&self) -> &str {
        self.schema.as_str()
    }

    /// Closes the pool: waits for connections in use to come back, then
    /// closes them all. Later operations answer
    /// [`ErrorKind::Unavailable`].
    pub async fn close(&self) {
        self.releases.stop();
        self.sessions.return_all();
        self.pool().close().await;
    }

    /// Drops the store's schema with everything in it (records, jobs, the
    /// fence sequence, the migration history), then closes the pool: for
    /// tests and benchmarks that made a schema of their own, as
    /// `RedisStore::delete_namespace` is for Redis. Needs a role that owns
    /// the schema.
    ///
    /// # Errors
    ///
    /// The store's errors; the pool is closed either way.
    pub async fn drop_schema(&self) -> Result<()> {
        self.sessions.return_all();
        let dropped = sqlx::query(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema.quoted()
        ))
        .execute(self.pool())
        .await;
        self.close().await;
        dropped.map(drop).map_err(store_error)
    }
}

/// Creates the schema if missing and applies the migrations it lacks, on
/// `connection`.
async fn migrate_on(connection: &mut PgConnection, schema: &SchemaName) -> Result<()> {
    let schema = schema.quoted();
    let mut creation = connection.begin().await.map_err(store_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SCHEMA_CREATION_LOCK)
        .execute(&mut *creation)
        .await
        .map_err(store_error)?;
    sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .execute(&mut *creation)
        .await
        .map_err(store_error)?;
    creation.commit().await.map_err(store_error)?;
    // `pg_temp` last: otherwise it is searched first, and a session's
    // temporary table could stand in for the schema's in the functions
    // the migrations create (they keep this path).
    sqlx::query(&format!("SET search_path TO {schema}, pg_temp"))
        .execute(&mut *connection)
        .await
        .map_err(store_error)?;
    // `run_direct` is `run` minus its `Acquire` bound, whose lifetime
    // makes `run` unusable in a future that must be `Send` for any
    // lifetime (sqlx documents it as the way around that).
    MIGRATOR.run_direct(connection).await.map_err(migrate_error)
}

/// Refuses a standby (`pg_is_in_recovery()`), where every write would fail
/// for as long as it stays one.
async fn refuse_standby(session: &mut PgConnection) -> Result<()> {
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut *session)
        .await
        .map_err(store_error)?;
    if in_recovery {
        return Err(Error::new(
            ErrorKind::Config,
            "the PostgreSQL server is a standby (pg_is_in_recovery() is true): every write \
             tenure makes would be refused; point the URL at the primary (or at an address \
             that follows it through failovers)",
        ));
    }
    Ok(())
}

/// Opens one session with `options`, within `wait`. A failure names the
/// server's address, database and user (never the password) and the cause.
/// Raises a session's `synchronous_commit` to `on` where it would
/// acknowledge a commit no standby has flushed (`off`, `local`,
/// `remote_write`), and keeps a stronger `remote_apply`.
const AT_LEAST_SYNCHRONOUS_COMMIT: &str = "SELECT set_config('synchronous_commit', 'on', false) \
     WHERE current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')";

async fn open_session(options: &PgConnectOptions, wait: Duration) -> Result<PgConnection> {
    let address = format!(
        "{}:{} (database {:?}, user {:?})",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default(),
        options.get_username()
    );
    if options.get_socket().is_none() && !options.get_host().starts_with('/') {
        speaks_postgres(options.get_host(), options.get_port(), wait)
            .await
            .map_err(|error| {
                Error::new(
                    error.kind(),
                    format!(
                        "could not connect to PostgreSQL at {address}: {}",
                        error.message()
                    ),
                )
            })?;
    }
    match tokio::time::timeout(wait, options.connect()).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => {
            let error = store_error(error);
            Err(Error::new(
                error.kind(),
                format!(
                    "could not connect to PostgreSQL at {address}: {}",
                    error.message()
                ),
            )
            .with_source(error))
        }
        Err(elapsed) => Err(Error::unavailable(format!(
            "could not connect to PostgreSQL at {address}: no answer within {wait:?}"
        ))
        .with_source(elapsed)),
    }
}

/// How long a server that took the connection may stay silent after
/// PostgreSQL's opening request before [`speaks_postgres`] gives up on it: a
/// PostgreSQL server answers that request at once (it is the first thing it
/// reads), while another protocol's server at the port (Redis, an HTTP
/// server) waits for more and would hold the connect for its whole
/// [`PgStoreConfig::acquire_timeout`].
const FIRST_REPLY_WAIT: Duration = Duration::from_secs(2);

/// Sends PostgreSQL's opening request (`SSLRequest`) to `host:port` and
/// reads the one-byte answer a PostgreSQL server gives (`S` or `N`, or `E`
/// when it cannot take the connection), so a URL naming another protocol's
/// port fails fast and says so. Connecting may take `connect_wait` (the
/// acquire timeout); the answer is held to [`FIRST_REPLY_WAIT`] (or
/// `connect_wait`, if shorter). A
/// connection that cannot be made, or that the server closes, is left for
/// the driver to report. The probe's connection is closed before the
/// driver opens its own: a server answering `N` logs nothing for it, one
/// offering TLS (`S`) may log an end of file before the TLS handshake.
///
/// # Errors
///
/// [`ErrorKind::Config`] for an answer no PostgreSQL server gives;
/// [`ErrorKind::Unavailable`] for no answer in time.
async fn speaks_postgres(host: &str, port: u16, connect_wait: Duration) -> Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    /// Length 8, then the `SSLRequest` code 80877103.
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    // The driver takes an IPv6 literal in brackets; the resolver does not.
    let host = host
        .strip_prefix('[')
        .and_then(|bare| bare.strip_suffix(']'))
        .unwrap_or(host);
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(connect_wait, tokio::net::TcpStream::connect((host, port))).await
    else {
        return Ok(());
    };
    let mut answer = [0_u8; 1];
    let answered = async {
        stream.write_all(&SSL_REQUEST).await?;
        stream.read_exact(&mut answer).await
    };
    let reply_wait = connect_wait.min(FIRST_REPLY_WAIT);
    match tokio::time::timeout(reply_wait, answered).await {
        // Closed or reset by the server: the driver reports it.
        Ok(Err(_)) => Ok(()),
        Ok(Ok(_)) => match answer[0] {
            b'S' | b'N' | b'E' => Ok(()),
            other => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the server at port {port} answered PostgreSQL's opening request with \
                     {:?}, which no PostgreSQL server sends: check the URL's port",
                    char::from(other)
                ),
            )),
        },
        Err(_) => Err(Error::unavailable(format!(
            "the server at port {port} took the connection but gave no answer to PostgreSQL's \
             opening request within {reply_wait:?}: check that the URL's port is \
             PostgreSQL's (another protocol's server, such as Redis at 6379, waits \
             silently), or that the server is not overloaded"
        ))),
    }
}

/// Checks, without changing anything, that `schema` carries exactly the
/// migrations of this version, all applied.
async fn verify_on(connection: &mut PgConnection, schema: &SchemaName) -> Result<()> {
    let name = schema.as_str();
    let apply = format!(
        "apply the migrations with a role that may change the schema: \
         `PgStore::apply_migrations(&PgStoreConfig::new(admin_url).schema({name:?}))`"
    );
    let rows = sqlx::query(&format!(
        "SELECT version, checksum, success FROM {}._sqlx_migrations ORDER BY version",
        schema.quoted()
    ))
    .fetch_all(&mut *connection)
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(error) => {
            let error = store_error(error);
            let message = match error.kind() {
                ErrorKind::Incompatible => format!(
                    "schema {name:?} holds no tenure migrations ({}); {apply}",
                    error.message()
                ),
                ErrorKind::Config => format!(
                    "cannot read schema {name:?}'s migration table ({}): grant the role \
                     USAGE on the schema and SELECT on {name}._sqlx_migrations",
                    error.message()
                ),
                _ => return Err(error),
            };
            return Err(Error::new(error.kind(), message).with_source(error));
        }
    };
    let mut applied = std::collections::BTreeMap::new();
    for row in &rows {
        let version: i64 = row.try_get("version").map_err(store_error)?;
        let checksum: Vec<u8> = row.try_get("checksum").map_err(store_error)?;
        let success: bool = row.try_get("success").map_err(store_error)?;
        applied.insert(version, (checksum, success));
    }
    for migration in MIGRATOR.iter() {
        if migration.migration_type.is_down_migration() {
            continue;
        }
        let (version, description) = (migration.version, &migration.description);
        match applied.remove(&version) {
            None => {
                return Err(Error::new(
                    ErrorKind::Incompatible,
                    format!(
                        "schema {name:?} lacks tenure migration {version} ({description}); {apply}"
                    ),
                ))
            }
            Some((_, false)) => {
                return Err(Error::new(
                    ErrorKind::Incompatible,
                    format!(
                        "tenure migration {version} ({description}) of schema {name:?} \
                         failed part-way; repair the schema, then {apply}"
                    ),
                ))
            }
            Some((checksum, true)) if checksum != *migration.checksum => {
                return Err(Error::new(
                    ErrorKind::Incompatible,
                    format!(
                        "tenure migration {version} ({description}) of schema {name:?} was \
                         applied from different SQL than this version's; point the store at \
                         another schema"
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(version) = applied.keys().next() {
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "schema {name:?} carries migration {version}, unknown to this version of \
                 tenure: it was written by a newer one; upgrade the library"
            ),
        ));
    }
    Ok(())
}
