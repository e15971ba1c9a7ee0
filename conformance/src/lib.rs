//! # conformance
//!
//! One suite every [`LeaseStore`] backend runs, so "implements the trait" and
//! "honours the contract" ([`tenure_lease_core::contract`]) mean the same thing. Bring your own
//! backend: implement [`Factory`] (a fresh, isolated store per case), then
//! either
//!
//! * run every case as its own named test:
//!
//!   ```ignore
//!   tenure_conformance::tenure_conformance!(MyFactory::default());
//!   ```
//!
//! * or run them all from your own code and read the [`Report`]:
//!
//!   ```no_run
//!   # #[tokio::main] async fn main() {
//!   // `MemoryFactory` is the kit's reference factory; see `memory.rs` for
//!   // the dozen lines a factory takes.
//!   let report = tenure_conformance::run_all(&tenure_conformance::memory::MemoryFactory).await;
//!   assert!(report.all_passed(), "{report}");
//!   # }
//!   ```
//!
//! Both forms come from one list of cases, so names never drift. A case that
//! cannot run (its server is not configured) is reported as skipped, never as
//! passed; with `TENURE_REQUIRE_SERVICES=1` it fails instead.
//!
//! The `fault_*` cases ([`cases::fault`]) check the contract's error rules
//! on any backend by wrapping the case's store in the
//! [`Faults`](tenure_lease_core::layer::Faults) layer: lost replies
//! ([`Fault::ReplyLost`](tenure_lease_core::layer::Fault::ReplyLost)) are
//! resolved by the next call, hung calls cut off by a time limit changed
//! nothing, and the keeper never takes an `Err` for an outcome. The damage
//! cases need the optional [`Factory::damager`]: it damages one field of a
//! stored record or job at a time ([`damage::Damage`]) so the kit can check
//! that point reads answer `Corrupt`, scans skip and report, and nothing else
//! changes. A factory without one (the default) sees them skipped, as a case
//! reports with [`Ctx::skip`].

mod harness;

pub mod cases;
pub mod damage;
pub mod memory;

#[doc(hidden)]
pub use harness::run_named_case;
pub use harness::{
    run_case, service_url, services_required, Case, CaseFuture, CaseOutcome, CaseReport,
    CaseResult, ClockControl, Ctx, Factory, Failure, Footprint, FootprintProbe, Report, Subject,
    CASE_TIMEOUT, REQUIRE_SERVICES_VAR,
};

use tenure_lease_core::{JobQueue, LeaseStore};

/// Runs every lease case against fresh stores from `factory` and reports each.
pub async fn run_all<F: Factory>(factory: &F) -> Report {
    run_cases(factory, cases::<F::Store>()).await
}

/// Runs every job-queue case against fresh stores from `factory`.
pub async fn run_queue_all<F: Factory>(factory: &F) -> Report
where
    F::Store: JobQueue,
{
    run_cases(factory, queue_cases::<F::Store>()).await
}

async fn run_cases<F: Factory>(factory: &F, cases: Vec<Case<F::Store>>) -> Report {
    let mut report = Report::default();
    for case in cases {
        let outcome = run_case(factory, case).await;
        report.cases.push(CaseReport {
            name: case.name,
            outcome,
        });
    }
    report
}

// `$d` carries a literal `$` into the generated macros, so they can declare
// their own metavariables.
macro_rules! define_cases {
    (
        $d:tt
        leases: [$($module:ident :: $name:ident),* $(,)?]
        queues: [$($queue_module:ident :: $queue_name:ident),* $(,)?]
    ) => {
        /// Every lease case of the kit ([contract §3 to §8 and
        /// §13](tenure_lease_core::contract)), in order.
        pub fn cases<S: LeaseStore + 'static>() -> Vec<Case<S>> {
            vec![$(Case {
                name: stringify!($name),
                run: |ctx| Box::pin(cases::$module::$name(ctx)),
            }),*]
        }

        /// Every job-queue case of the kit
        /// ([contract §9](tenure_lease_core::contract)), in order.
        pub fn queue_cases<S: JobQueue + 'static>() -> Vec<Case<S>> {
            vec![$(Case {
                name: stringify!($queue_name),
                run: |ctx| Box::pin(cases::$queue_module::$queue_name(ctx)),
            }),*]
        }

        /// Expands to one `#[test]` per lease case of the kit, named after
        /// the case, each running it on a fresh store from the factory
        /// expression (evaluated once per test).
        ///
        /// ```ignore
        /// mod memory {
        ///     tenure_conformance::tenure_conformance!(my_crate::tests::MemoryFactory::default());
        /// }
        /// ```
        #[macro_export]
        macro_rules! tenure_conformance {
            ($d factory:expr $d(,)?) => {
                $(
                    #[test]
                    fn $name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($name),
                            $d crate::cases,
                        );
                    }
                )*
            };
        }

        /// Like [`tenure_conformance!`], for the job-queue cases; the
        /// factory's store must implement `JobQueue`.
        #[macro_export]
        macro_rules! tenure_queue_conformance {
            ($d factory:expr $d(,)?) => {
                $(
                    #[test]
                    fn $queue_name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($queue_name),
                            $d crate::queue_cases,
                        );
                    }
                )*
            };
        }
    };
}

define_cases! {$
    leases: [
admit::admit_creates_pending_record,
admit::admit_without_ttl_has_no_lease,
admit::admit_duplicate_id_is_already_exists,
admit::admit_reject_conflicts_with_any_active_holder,
admit::admit_reject_ignores_finished_holders,
admit::admit_interrupt_blocked_by_valid_lease_of_other,
admit::admit_interrupt_blocked_within_grace,
admit::admit_interrupt_takes_expired_holder,
admit::admit_interrupt_takes_no_lease_holder,
admit::admit_interrupt_takes_own_holder,
admit::admit_interrupt_rollback_blocker_first,
admit::admit_interrupt_rollback_blocker_middle,
admit::admit_interrupt_rollback_blocker_last,
admit::admit_multi_scope_all_or_nothing,
admit::admit_empty_scopes_never_conflict,
admit::admit_interrupt_releases_every_scope_of_holder,
admit::admit_interrupt_fences_follow_answer_order,
admit::admit_interrupt_fences_follow_answer_order_of_three,
admit::admit_kind_is_carried_through_answers,
admit::race_admissions_one_scope_exactly_one_admitted,
admit::race_admissions_one_id_exactly_one_admitted,
admit::race_admissions_opposite_scope_orders_never_deadlock,
admit::race_interrupt_admissions_answer_admitted_or_conflict,
renew::renew_extends_lease,
renew::renew_pending_record,
renew::renew_wrong_owner_is_owner_changed,
renew::renew_wrong_fence_is_fence_changed,
renew::renew_terminal_is_terminal,
renew::renew_interrupted_is_interrupted,
renew::renew_missing_is_missing,
renew::renew_after_expiry_until_taken,
renew::renew_many_answers_per_claim,
transition::transition_pending_running_succeeded,
transition::transition_pending_to_terminal,
transition::transition_terminal_is_immutable,
transition::transition_interrupted_only_to_failed,
transition::transition_disallowed_edges_rejected,
transition::transition_stale_claim_rejected,
transition::transition_terminal_releases_scopes,
transition::transition_no_late_success_after_takeover,
takeover::takeover_expired_lease_fail,
takeover::takeover_expired_lease_adopt,
takeover::takeover_valid_lease_not_taken,
takeover::takeover_within_grace_not_taken,
takeover::takeover_grace_is_exact_below_a_microsecond,
takeover::takeover_no_lease_taken,
takeover::takeover_terminal_not_taken,
takeover::takeover_missing_not_taken,
takeover::takeover_interrupted_not_taken,
takeover::takeover_renewal_between_scan_and_claim_wins,
takeover::takeover_fail_releases_scopes,
takeover::race_takeovers_exactly_one_taken,
fence::fence_increases_across_takeover_chain,
fence::fence_increases_across_readmissions_and_purge,
fence::fence_is_store_wide,
listing::list_expired_respects_grace,
listing::list_expired_includes_no_lease,
listing::list_expired_created_before_is_a_timestamp,
listing::list_expired_limit_and_order,
listing::list_expired_excludes_inactive,
listing::list_by_scope_newest_first_with_finished,
listing::list_active_only_active,
listing::purge_removes_old_terminal_only,
listing::timestamps_round_trip_at_microseconds,
listing::metadata_round_trips,
listing::verbatim_ids_and_scopes_never_collide,
input::invalid_admit_is_rejected_and_changes_nothing,
input::invalid_claims_are_rejected_and_change_nothing,
input::invalid_takeover_and_queries_are_rejected,
model::model_based_random_operations,
keeper::keeper_keeps_a_lease_alive_across_three_ttls,
keeper::keeper_heartbeat_notices_a_takeover,
keeper::keeper_complete_after_takeover_answers_stale,
keeper::keeper_reconciler_recovers_orphans_but_never_its_own,
keeper::keeper_adopted_orphan_is_kept_alive_and_completed,
keeper::keeper_cancel_stops_local_runs_and_reports_valid_leases_elsewhere,
reliability::hostile_input_is_rejected_or_answered_never_panics,
reliability::concurrent_history_keeps_invariants_and_fences_guard_a_resource,
fault::fault_keeper_fail_stops_at_its_deadline_when_renewals_fail,
fault::fault_keeper_never_counts_a_lost_renewal_reply_as_renewed,
fault::fault_keeper_rides_through_a_short_outage,
fault::fault_admission_reply_lost_retry_answers_already_exists,
fault::fault_timed_out_admission_changed_nothing,
fault::fault_takeover_reply_lost_is_read_back_by_get,
fault::fault_transition_reply_lost_retry_answers_terminal,
fault::fault_renew_reply_lost_extended_the_lease,
fault::fault_damaged_lease_is_corrupt_skipped_and_contained,
    ]
    queues: [
        queue::queue_enqueue_and_get_round_trip,
        queue::queue_enqueue_duplicate_is_already_exists,
        queue::queue_enqueue_batch_all_or_nothing,
        queue::queue_claim_best_visible_first,
        queue::queue_claim_skips_future_run_at,
        queue::queue_capabilities_subset_rule,
        queue::queue_claim_sets_owner_lease_attempt_fence,
        queue::race_queue_claimers_never_share_a_job,
        queue::queue_reclaim_has_greater_fence_and_next_attempt,
        queue::queue_renew_and_loss_reasons,
        queue::queue_requeued_job_stops_old_copy_and_is_never_taken_back,
        queue::queue_reclaimed_job_is_never_taken_back,
        queue::queue_reaped_last_attempt_is_taken_back_and_completed,
        queue::queue_operator_retry_beats_take_back,
        queue::queue_stale_copy_sees_other_claim_as_not_its_own,
        queue::queue_complete_and_fail_are_fenced,
        queue::queue_renewal_after_complete_answers_finished,
        queue::queue_fail_retry_backoff_delays_visibility,
        queue::queue_fail_dead_letter_and_attempts_exhausted,
        queue::queue_defer_refunds_attempt_and_stamps_requirement,
        queue::queue_reap_requeues_or_dead_letters_by_attempts_left,
        queue::queue_dead_letters_listed_and_retried,
        queue::queue_invalid_input_rejected_and_changes_nothing,
        queue::queue_fences_shared_with_leases,
        queue_reliability::queue_hostile_input_is_rejected_or_answered_never_panics,
        queue_reliability::queue_concurrent_claims_keep_invariants_and_fences_guard_a_resource,
        queue_retention::queue_purge_jobs_removes_old_finished_only,
        queue_retention::queue_purge_jobs_counts_age_from_the_finish,
        queue_retention::queue_purge_jobs_boundary_is_exact,
        queue_retention::queue_purge_jobs_leaves_the_queue_working,
        queue_retention::queue_purge_jobs_invalid_retention_changes_nothing,
        queue_retention::queue_purge_leaves_nothing_behind,
        fault::fault_queue_complete_reply_lost_retry_answers_finished,
        fault::fault_queue_claim_reply_lost_never_hands_a_job_to_two_workers,
        fault::fault_damaged_job_is_corrupt_passed_over_and_contained,
    ]
}
