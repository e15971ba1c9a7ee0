//! # conformance
//!
//! One suite every [`LeaseStore`] backend runs, so "implements the trait" and
//! "honours the contract" ([`tenure_lease_core::contract`]) mean the same thing. Bring your own
//! backend: implement [`Factory`] (a fresh, isolated store per case), then
//! either
//!
//! * run every case of every area as its own named test, each area a
//!   module ([`tenure_kit!`]; one area alone: [`tenure_conformance!`] and
//!   the macros named below):
//!
//!   ```ignore
//!   tenure_conformance::tenure_kit!(MyFactory::default());
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
//! Both forms come from one list of cases, so names never drift. The
//! job-queue cases ([`tenure_queue_conformance!`], [`run_queue_all`]) need a
//! store that is also a [`JobQueue`], the fence-gate cases
//! ([`tenure_gate_conformance!`], [`run_gate_all`]) one that is also a
//! [`FenceStore`]; a gate case that checks what survives a reconnect needs
//! [`Factory::reopen`] and is reported skipped without it, and the two clock
//! cases (a store must decide by its own clock, not the process's) need
//! [`Factory::clock_offset`] ([`offset_clock`]). A case that
//! cannot run (its server is not configured) is reported as skipped, never as
//! passed; with `TENURE_REQUIRE_SERVICES=1` it fails instead.
//!
//! ## Opt-in suites
//!
//! Some promises take more than a fresh store to check: a network failing
//! on demand, several processes, a server restarted mid-run, a server
//! deployed wrongly. The [`suites`] hold those scenarios; a factory enables
//! each by answering a capability method of [`Factory`] (all default to
//! `None`, and the suite's tests are then reported skipped with the reason):
//!
//! * [`Factory::network`] ([`suites::network::NetworkSupport`]): a second
//!   store on the case's records behind [`suites::network::NetworkFaults`],
//!   for [`tenure_network_conformance!`];
//! * [`Factory::processes`] ([`suites::process::ProcessSupport`]): a store
//!   child processes open by an address, for [`tenure_process_conformance!`]
//!   and [`tenure_queue_process_conformance!`] (the test binary re-runs
//!   itself as the children, so the factory expression must build the same
//!   factory there);
//! * [`Factory::restart`] ([`suites::restart::RestartSupport`]): a private
//!   server ([`suites::restart::RestartableServer`]) and a store on it, for
//!   [`tenure_restart_conformance!`];
//! * [`Factory::deployment`] ([`suites::deployment::DeploymentSupport`]):
//!   misdeployments the factory can stage and connect to, whose typed
//!   refusal [`tenure_deployment_conformance!`] checks.
//! * [`Factory::nemeses`] ([`suites::nemesis::NemesisSupport`]): a store on
//!   the real clock, for [`tenure_nemesis_conformance!`], which records a
//!   racing workload under faults (lost replies, hangs, clock steps, and,
//!   with the capabilities above, partitions, a killed server, paused and
//!   killed owner processes) and checks the whole history with
//!   [`history::check`].
//!
//! ```ignore
//! tenure_conformance::tenure_network_conformance!(MyFactory::from_env());
//! tenure_conformance::tenure_process_conformance!(MyFactory::from_env());
//! ```
//!
//! Every skip line, of the kit and of a backend's own tests, is printed by
//! [`report_skip`].
//!
//! ## Histories
//!
//! [`history`] records what clients asked a store and what they were
//! answered ([`history::History::client`], one layer per client) and
//! checks a whole history against the contract's safety properties
//! ([`history::check`]): fences grow, owners never overlap, gates never go
//! back, acknowledged writes stay. Use it on your own soak as well as the
//! kit does.
//!
//! ## Fault and damage cases
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

mod capability;
mod harness;

pub mod cases;
pub mod damage;
pub mod history;
pub mod memory;
pub mod offset_clock;
pub mod reopen;
pub mod suites;

#[doc(hidden)]
pub use harness::run_named_case;
pub use harness::{report_skip, skip_unless_required};
pub use harness::{
    run_case, service_url, services_required, Case, CaseFuture, CaseOutcome, CaseReport,
    CaseResult, ClockControl, Ctx, Factory, Failure, Footprint, FootprintProbe, Report, Subject,
    CASE_TIMEOUT, CREATE_FAILURES_BEFORE_GIVING_UP, CREATE_TIMEOUT, REQUIRE_SERVICES_VAR,
};

use tenure_lease_core::{FenceStore, JobQueue, LeaseStore};

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

/// Runs every fence-gate case against fresh stores from `factory`.
pub async fn run_gate_all<F: Factory>(factory: &F) -> Report
where
    F::Store: FenceStore,
{
    run_cases(factory, gate_cases::<F::Store>()).await
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
        leases: [$($area:ident :: $module:ident :: $name:ident),* $(,)?]
        queues: [$($queue_area:ident :: $queue_module:ident :: $queue_name:ident),* $(,)?]
        gates: [$($gate_area:ident :: $gate_module:ident :: $gate_name:ident),* $(,)?]
        variant: {
            leases: [$($variant_name:ident),* $(,)?]
            queues: [$($variant_queue_name:ident),* $(,)?]
            gates: [$($variant_gate_name:ident),* $(,)?]
        }
    ) => {
        /// Every lease case of the kit ([contract §3 to §8 and
        /// §13](tenure_lease_core::contract)), in order.
        pub fn cases<S: LeaseStore + 'static>() -> Vec<Case<S>> {
            vec![$(Case {
                name: stringify!($name),
                run: |ctx| Box::pin(cases::$area::$module::$name(ctx)),
            }),*]
        }

        /// Every job-queue case of the kit
        /// ([contract §9](tenure_lease_core::contract)), in order.
        pub fn queue_cases<S: JobQueue + 'static>() -> Vec<Case<S>> {
            vec![$(Case {
                name: stringify!($queue_name),
                run: |ctx| Box::pin(cases::$queue_area::$queue_module::$queue_name(ctx)),
            }),*]
        }

        /// Every fence-gate case of the kit
        /// ([contract §7](tenure_lease_core::contract)), in order.
        pub fn gate_cases<S: LeaseStore + FenceStore + 'static>() -> Vec<Case<S>> {
            vec![$(Case {
                name: stringify!($gate_name),
                run: |ctx| Box::pin(cases::$gate_area::$gate_module::$gate_name(ctx)),
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

        /// The cases a deployment variant of a backend already run whole
        /// can change, one `#[test]` each, for the variant's factory
        /// (another isolation level, a role with fewer privileges, another
        /// topology): every race and concurrent-history case, the
        /// model-based sequences (every operation, its answers checked
        /// against the model), the hostile-input cases (every operation's
        /// refusals), the tricky names (every key and row an identifier
        /// makes), the batch renewal, and the purge and counting reads no
        /// model runs (`count_purgeable`, `count_jobs`). A variant changes how
        /// statements run, not what the rules decide, so the cases that
        /// check one rule in one sequence pass or fail with the backend's
        /// main run. The store must be a `LeaseStore`, a `JobQueue` and a
        /// `FenceStore`.
        ///
        /// ```ignore
        /// mod serializable {
        ///     tenure_conformance::tenure_variant_conformance!(MyFactory::serializable());
        /// }
        /// ```
        #[macro_export]
        macro_rules! tenure_variant_conformance {
            ($d factory:expr $d(,)?) => {
                $(
                    #[test]
                    fn $variant_name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($variant_name),
                            $d crate::cases,
                        );
                    }
                )*
                $(
                    #[test]
                    fn $variant_queue_name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($variant_queue_name),
                            $d crate::queue_cases,
                        );
                    }
                )*
                $(
                    #[test]
                    fn $variant_gate_name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($variant_gate_name),
                            $d crate::gate_cases,
                        );
                    }
                )*
            };
        }

        /// Like [`tenure_conformance!`], for the fence-gate cases; the
        /// factory's store must implement `FenceStore`.
        #[macro_export]
        macro_rules! tenure_gate_conformance {
            ($d factory:expr $d(,)?) => {
                $(
                    #[test]
                    fn $gate_name() {
                        $d crate::run_named_case(
                            $d factory,
                            ::core::stringify!($gate_name),
                            $d crate::gate_cases,
                        );
                    }
                )*
            };
        }
    };
}

define_cases! {$
    leases: [
        lease::admit::admit_creates_pending_record,
        lease::admit::admit_without_ttl_has_no_lease,
        lease::admit::admit_duplicate_id_is_already_exists,
        lease::admit::admit_reject_conflicts_with_any_active_holder,
        lease::admit::admit_reject_ignores_finished_holders,
        lease::admit::admit_interrupt_blocked_by_valid_lease_of_other,
        lease::admit::admit_interrupt_blocked_within_grace,
        lease::admit::admit_interrupt_takes_expired_holder,
        lease::admit::admit_interrupt_takes_no_lease_holder,
        lease::admit::admit_interrupt_takes_own_holder,
        lease::admit::admit_interrupt_rollback_blocker_first,
        lease::admit::admit_interrupt_rollback_blocker_middle,
        lease::admit::admit_interrupt_rollback_blocker_last,
        lease::admit::admit_multi_scope_all_or_nothing,
        lease::admit::admit_empty_scopes_never_conflict,
        lease::admit::admit_interrupt_releases_every_scope_of_holder,
        lease::admit::admit_interrupt_fences_follow_answer_order,
        lease::admit::admit_interrupt_fences_follow_answer_order_of_three,
        lease::admit::admit_kind_is_carried_through_answers,
        lease::admit::race_admissions_one_scope_exactly_one_admitted,
        lease::admit::race_admissions_one_id_exactly_one_admitted,
        lease::admit::race_admissions_opposite_scope_orders_never_deadlock,
        lease::admit::race_interrupt_admissions_answer_admitted_or_conflict,
        lease::admit::admit_interrupt_boundary_is_exact_to_the_microsecond,
        lease::admit::admit_interrupt_of_a_multi_scope_holder_interrupts_it_once,
        lease::admit::admit_overlapping_multi_scope_admissions_keep_one_holder_per_scope,
        lease::renew::renew_extends_lease,
        lease::renew::renew_pending_record,
        lease::renew::renew_wrong_owner_is_owner_changed,
        lease::renew::renew_wrong_fence_is_fence_changed,
        lease::renew::renew_terminal_is_terminal,
        lease::renew::renew_interrupted_is_interrupted,
        lease::renew::renew_missing_is_missing,
        lease::renew::renew_after_expiry_until_taken,
        lease::renew::renew_many_answers_per_claim,
        lease::progress::progress_is_recorded_with_a_renewal,
        lease::progress::progress_bounds_are_exact,
        lease::transition::transition_pending_running_succeeded,
        lease::transition::transition_pending_to_terminal,
        lease::transition::transition_terminal_is_immutable,
        lease::transition::transition_interrupted_only_to_failed,
        lease::transition::transition_disallowed_edges_rejected,
        lease::transition::transition_stale_claim_rejected,
        lease::transition::transition_terminal_releases_scopes,
        lease::transition::transition_no_late_success_after_takeover,
        lease::transition::updated_at_moves_with_every_write,
        lease::takeover::takeover_expired_lease_fail,
        lease::takeover::takeover_expired_lease_adopt,
        lease::takeover::takeover_valid_lease_not_taken,
        lease::takeover::takeover_within_grace_not_taken,
        lease::takeover::takeover_grace_is_exact_below_a_microsecond,
        lease::takeover::takeover_boundary_is_exact_to_the_microsecond,
        lease::takeover::takeover_by_the_owner_of_a_valid_lease_is_not_taken,
        lease::takeover::takeover_no_lease_taken,
        lease::takeover::takeover_terminal_not_taken,
        lease::takeover::takeover_missing_not_taken,
        lease::takeover::takeover_interrupted_not_taken,
        lease::takeover::takeover_renewal_between_scan_and_claim_wins,
        lease::takeover::takeover_fail_releases_scopes,
        lease::takeover::race_takeovers_exactly_one_taken,
        lease::releases::releases_name_every_scope_a_finished_lease_frees,
        lease::releases::releases_name_every_scope_of_a_lease_with_the_most_scopes,
        lease::releases::releases_name_the_counted_scope_a_slot_frees,
        lease::releases::releases_name_the_scopes_a_failing_takeover_frees,
        lease::releases::releases_name_the_scopes_an_interrupting_admission_frees,
        lease::releases::a_waiter_is_admitted_when_the_holder_finishes,
        lease::fence::fence_increases_across_takeover_chain,
        lease::fence::fence_increases_across_readmissions_and_purge,
        lease::fence::fence_is_store_wide,
        lease::listing::list_expired_respects_grace,
        lease::listing::list_expired_includes_no_lease,
        lease::listing::list_expired_created_before_is_a_timestamp,
        lease::listing::list_expired_limit_and_order,
        lease::listing::list_expired_excludes_inactive,
        lease::listing::list_by_scope_newest_first_with_finished,
        lease::listing::list_active_only_active,
        lease::listing::purge_removes_old_finished_only,
        lease::listing::timestamps_round_trip_at_microseconds,
        lease::listing::metadata_round_trips,
        lease::listing::verbatim_ids_and_scopes_never_collide,
        lease::listing::list_expired_boundary_is_exact_to_the_microsecond,
        lease::listing::purge_boundary_is_exact_to_the_microsecond,
        lease::listing::purge_counts_age_from_the_finish,
        lease::listing::list_expired_applies_every_filter_before_the_limit,
        clock::lease::clock_lease_decisions_follow_the_store_clock,
        lease::listing::list_by_scope_orders_ties_by_fence,
        lease::listing::purge_leaves_nothing_behind,
        lease::listing::purge_interrupted_boundary_is_exact_to_the_microsecond,
        lease::listing::purge_counts_an_interrupted_records_age_from_the_interruption,
        lease::listing::purge_leaves_nothing_behind_of_interrupted_records,
        lease::race::race_renew_vs_takeover_exactly_one_wins,
        lease::race::race_terminal_write_vs_takeover_exactly_one_wins,
        lease::race::race_renew_vs_interrupt_admission_exactly_one_wins,
        lease::race::race_adopters_leave_the_greatest_fence_stored,
        lease::race::race_admissions_one_id_overlapping_scopes_answer_already_exists,
        lease::input::invalid_admit_is_rejected_and_changes_nothing,
        lease::input::invalid_claims_are_rejected_and_change_nothing,
        lease::input::invalid_takeover_and_queries_are_rejected,
        lease::rate::rate_limit_admits_up_to_its_permits,
        lease::rate::rate_limit_is_judged_after_the_id_and_the_scopes,
        lease::rate::rate_limit_window_is_exact_to_the_microsecond,
        lease::rate::rate_limit_holds_then_frees,
        lease::rate::rate_limit_retry_after_counts_from_the_oldest_use,
        lease::rate::race_rate_limited_admissions_admit_exactly_the_permits,
        lease::rate::rate_limit_tricky_keys_never_collide,
        lease::rate::rate_limit_bounds_are_exact,
        lease::counted::counted_scope_admits_up_to_its_capacity,
        lease::counted::counted_scope_exclusive_scope_is_slot_zero,
        lease::counted::counted_scope_end_frees_only_the_holders_slot,
        lease::counted::counted_scope_lapsed_holders_slot_is_taken_over_with_a_new_fence,
        lease::counted::counted_scope_interrupt_prefers_a_free_slot,
        lease::counted::counted_scope_full_interrupts_the_lowest_interruptible_slot,
        lease::counted::counted_scope_is_taken_with_the_other_scopes_or_not_at_all,
        lease::counted::race_counted_admissions_admit_exactly_the_capacity,
        lease::counted::counted_scope_holders_renew_and_end_on_their_own,
        lease::counted::counted_scope_tricky_names_never_collide,
        lease::counted::counted_scope_capacity_bounds_are_exact,
        random::model::model_based_random_operations,
        lease::keeper::keeper_keeps_a_lease_alive_across_three_ttls,
        lease::keeper::keeper_heartbeat_notices_a_takeover,
        lease::keeper::keeper_complete_after_takeover_answers_stale,
        lease::keeper::keeper_progress_rides_on_a_fenced_renewal,
        lease::keeper::keeper_reconciler_recovers_orphans_but_never_its_own,
        lease::keeper::keeper_adopted_orphan_is_kept_alive_and_completed,
        lease::keeper::keeper_cancel_stops_local_runs_and_reports_valid_leases_elsewhere,
        lease::keeper_cancel::keeper_cancel_anywhere_takes_over_a_crashed_owners_run,
        lease::keeper_cancel::keeper_cancel_anywhere_reports_a_live_owner_with_its_retry_after,
        lease::keeper_cancel::keeper_cancel_anywhere_answers_local_terminal_interrupted_and_missing,
        lease::keeper_cancel::keeper_cancel_anywhere_answers_unknown_when_the_store_cannot_say,
        lease::keeper_cancel::race_keeper_cancel_anywhere_vs_owner_renewal,
        lease::keeper_cancel::race_keeper_cancel_anywhere_vs_peers,
        lease::keeper_kinds::keeper_reconciler_releases_silent_kinds_and_recovers_the_rest,
        lease::keeper_kinds::keeper_reconciler_can_release_every_unlisted_kind,
        random::hostile::hostile_input_is_rejected_or_answered_never_panics,
        random::history::concurrent_history_keeps_invariants_and_fences_guard_a_resource,
    ]
    queues: [
        queue::enqueue::queue_enqueue_and_get_round_trip,
        queue::enqueue::queue_enqueue_duplicate_is_already_exists,
        queue::enqueue::queue_enqueue_batch_all_or_nothing,
        queue::enqueue::queue_enqueue_batch_jobs_are_what_enqueue_makes_of_each,
        queue::claim::queue_claim_best_visible_first,
        queue::claim::queue_claim_skips_future_run_at,
        queue::claim::queue_capabilities_subset_rule,
        queue::claim::queue_claim_sets_owner_lease_attempt_fence,
        queue::claim::race_queue_claimers_never_share_a_job,
        queue::claim::queue_reclaim_has_greater_fence_and_next_attempt,
        queue::claim::queue_stale_copy_sees_other_claim_as_not_its_own,
        queue::claim::queue_fences_shared_with_leases,
        queue::claim::queue_time_rules_are_exact_to_the_microsecond,
        queue::settle::queue_renew_and_loss_reasons,
        queue::settle::queue_complete_and_fail_are_fenced,
        queue::settle::queue_renewal_after_complete_answers_finished,
        queue::settle::queue_fail_retry_backoff_delays_visibility,
        queue::settle::queue_fail_dead_letter_and_attempts_exhausted,
        queue::settle::queue_defer_refunds_attempt_and_stamps_requirement,
        queue::complete_many::queue_complete_many_settles_each_claim_as_complete_would,
        queue::complete_many::queue_complete_many_refuses_bad_batches,
        queue::complete_many::queue_complete_many_answers_and_writes_as_complete_does_for_twins,
        queue::batches::queue_batches_with_a_job_named_twice_anywhere_are_refused_whole,
        queue::progress::queue_progress_is_recorded_with_a_renewal,
        queue::progress::queue_progress_bounds_are_exact,
        queue::unique::queue_unique_duplicate_names_the_holder,
        queue::unique::queue_unique_duplicate_names_the_earliest_holder,
        queue::unique::queue_unique_key_is_freed_when_its_job_leaves_the_policy,
        queue::unique::queue_unique_period_ends_exactly,
        queue::unique::queue_unique_period_holds_then_frees,
        queue::unique::queue_unique_batch_is_judged_in_order,
        queue::unique::race_queue_unique_enqueues_exactly_one_wins,
        queue::unique::queue_unique_purge_keeps_period_holders,
        queue::unique::queue_unique_bounds_are_exact,
        queue::unique::queue_unique_tricky_keys_never_collide,
        queue::rate::queue_claim_limited_claims_no_more_than_the_permits,
        queue::concurrency::queue_concurrency_limit_runs_at_most_its_capacity,
        queue::concurrency::race_queue_concurrency_limit_runs_exactly_its_capacity,
        queue::concurrency::queue_concurrency_limit_takes_a_lapsed_workers_slot,
        queue::rate::queue_claim_refuses_a_rate_limit,
        queue::rate::queue_claim_limited_window_is_exact_to_the_microsecond,
        queue::rate::race_queue_rate_limited_claims_take_exactly_the_permits,
        queue::rate::queue_claim_limited_holds_back_only_claimable_jobs,
        queue::rate::queue_claim_limited_retry_after_counts_from_the_oldest_use,
        queue::rate::race_rate_limited_admissions_and_claims_share_the_permits,
        queue::renew_jobs::queue_renew_jobs_answers_each_claim_as_renew_job_would,
        queue::renew_jobs::queue_renew_jobs_refuses_bad_batches,
        queue::renew_jobs::queue_renew_jobs_answers_and_writes_as_renew_job_does_for_twins,
        queue::take_back::queue_requeued_job_stops_old_copy_and_is_never_taken_back,
        queue::take_back::queue_reclaimed_job_is_never_taken_back,
        queue::take_back::queue_reaped_last_attempt_is_taken_back_and_completed,
        queue::take_back::queue_operator_retry_beats_take_back,
        queue::take_back::queue_old_copy_is_refused_after_every_state_change,
        queue::take_back::queue_job_never_taken_back_shows_no_trace,
        queue::take_back::queue_take_back_trace_survives_completion,
        queue::take_back::queue_second_take_back_counts_again,
        queue::reap::queue_reap_requeues_or_dead_letters_by_attempts_left,
        queue::reap::queue_dead_letters_listed_and_retried,
        queue::list_jobs::queue_list_jobs_by_state_oldest_first,
        queue::list_jobs::queue_counts_name_every_queue_with_its_jobs_by_state,
        queue::list_jobs::queue_listings_filter_before_the_limit_and_break_ties_by_id,
        queue::list_jobs::queue_listings_match_the_reference_at_every_limit,
        queue::names::queue_tricky_names_never_collide,
        queue::reap::race_complete_vs_reap_exactly_one_wins,
        queue::input::queue_invalid_input_rejected_and_changes_nothing,
        random::hostile_queue::queue_hostile_input_is_rejected_or_answered_never_panics,
        random::history_queue::queue_concurrent_claims_keep_invariants_and_fences_guard_a_resource,
        random::queue_model::queue_model_based_random_operations,
        queue::retention::queue_purge_jobs_removes_old_finished_only,
        queue::retention::queue_purge_jobs_counts_age_from_the_finish,
        queue::retention::queue_purge_jobs_boundary_is_exact,
        queue::retention::queue_purge_jobs_leaves_the_queue_working,
        queue::retention::queue_purge_jobs_invalid_retention_changes_nothing,
        queue::retention::queue_purge_leaves_nothing_behind,
        queue::reuse::queue_an_id_is_reused_only_after_its_job_is_purged,
        clock::queue::clock_queue_decisions_follow_the_store_clock,
        fault::errors::fault_keeper_fail_stops_at_its_deadline_when_renewals_fail,
        fault::errors::fault_keeper_never_counts_a_lost_renewal_reply_as_renewed,
        fault::errors::fault_keeper_rides_through_a_short_outage,
        fault::errors::fault_admission_reply_lost_retry_answers_already_exists,
        fault::errors::fault_timed_out_admission_changed_nothing,
        fault::errors::fault_takeover_reply_lost_is_read_back_by_get,
        fault::errors::fault_transition_reply_lost_retry_answers_terminal,
        fault::errors::fault_renew_reply_lost_extended_the_lease,
        fault::damage::fault_damaged_lease_is_corrupt_skipped_and_contained,
        fault::queue::fault_queue_complete_reply_lost_retry_answers_finished,
        fault::queue::fault_queue_claim_reply_lost_never_hands_a_job_to_two_workers,
        fault::damage::fault_damaged_job_is_corrupt_passed_over_and_contained,
    ]
    gates: [
        gate::check::gate_refuses_a_taken_over_owner_after_the_takers_fence,
        gate::check::gate_accepts_an_equal_fence,
        gate::check::gate_resources_are_independent,
        gate::check::gate_survives_a_reopened_store,
        gate::check::gate_per_slot_refuses_a_holder_that_lost_its_slot,
        gate::race::race_gate_checks_leave_the_highest_and_refusals_are_truthful,
        gate::race::race_gate_climbers_never_land_below_an_accepted_fence,
        gate::retention::gate_purge_removes_only_gates_unused_past_retention,
        gate::retention::gate_a_raised_fence_refreshes_the_gate,
        gate::retention::gate_purge_boundary_is_exact_to_the_microsecond,
        gate::input::gate_invalid_input_is_rejected_and_changes_nothing,
        gate::list::gate_list_names_every_gate_in_name_order,
        gate::list::gate_list_pages_by_after_and_limit,
        gate::list::gate_list_leaves_out_purged_gates,
        gate::list::gate_list_invalid_input_is_rejected,
        random::gate_model::gate_model_based_random_operations,
    ]
    variant: {
        leases: [
            race_admissions_one_scope_exactly_one_admitted,
            race_counted_admissions_admit_exactly_the_capacity,
            race_admissions_one_id_exactly_one_admitted,
            race_admissions_opposite_scope_orders_never_deadlock,
            race_interrupt_admissions_answer_admitted_or_conflict,
            race_takeovers_exactly_one_taken,
            race_renew_vs_takeover_exactly_one_wins,
            race_terminal_write_vs_takeover_exactly_one_wins,
            race_renew_vs_interrupt_admission_exactly_one_wins,
            race_adopters_leave_the_greatest_fence_stored,
            race_admissions_one_id_overlapping_scopes_answer_already_exists,
            race_keeper_cancel_anywhere_vs_owner_renewal,
            race_keeper_cancel_anywhere_vs_peers,
            concurrent_history_keeps_invariants_and_fences_guard_a_resource,
            model_based_random_operations,
            hostile_input_is_rejected_or_answered_never_panics,
            race_rate_limited_admissions_admit_exactly_the_permits,
            rate_limit_tricky_keys_never_collide,
            verbatim_ids_and_scopes_never_collide,
            purge_removes_old_finished_only,
            renew_many_answers_per_claim,
            keeper_keeps_a_lease_alive_across_three_ttls,
        ]
        queues: [
            race_queue_claimers_never_share_a_job,
            race_complete_vs_reap_exactly_one_wins,
            queue_concurrent_claims_keep_invariants_and_fences_guard_a_resource,
            queue_model_based_random_operations,
            queue_hostile_input_is_rejected_or_answered_never_panics,
            queue_tricky_names_never_collide,
            queue_counts_name_every_queue_with_its_jobs_by_state,
            race_queue_unique_enqueues_exactly_one_wins,
            queue_unique_batch_is_judged_in_order,
            queue_unique_tricky_keys_never_collide,
            race_queue_rate_limited_claims_take_exactly_the_permits,
            race_rate_limited_admissions_and_claims_share_the_permits,
        ]
        gates: [
            race_gate_checks_leave_the_highest_and_refusals_are_truthful,
            race_gate_climbers_never_land_below_an_accepted_fence,
            gate_resources_are_independent,
            gate_list_pages_by_after_and_limit,
            gate_model_based_random_operations,
        ]
    }
}

/// Expands to every area of the kit for one factory, each in its own
/// module of tests named after the area: `leases`
/// ([`tenure_conformance!`]), `gates` ([`tenure_gate_conformance!`]),
/// `queue` ([`tenure_queue_conformance!`]), and the opt-in suites
/// `nemesis`, `processes`, `queue_processes`, `network`, `restart` and
/// `deployment`. The opt-in scenarios run where the factory offers their
/// capability and are reported skipped, with the `Factory` method that
/// answered `None`, where it does not, so one line covers a backend and a
/// capability added to its factory is tested without touching the tests.
///
/// The store must be a `LeaseStore`, a `JobQueue` and a `FenceStore`, and
/// the factory expression is evaluated once per test (child processes of
/// the process suite evaluate it again, so it must read the same
/// environment). Items of the calling module are visible in the
/// expression.
///
/// ```ignore
/// mod kit {
///     use crate::support;
///     tenure_conformance::tenure_kit!(support::MyFactory::from_env());
/// }
/// ```
#[macro_export]
macro_rules! tenure_kit {
    ($factory:expr $(,)?) => {
        $crate::tenure_kit!(@area leases, tenure_conformance, $factory);
        $crate::tenure_kit!(@area gates, tenure_gate_conformance, $factory);
        $crate::tenure_kit!(@area queue, tenure_queue_conformance, $factory);
        $crate::tenure_kit!(@area nemesis, tenure_nemesis_conformance, $factory);
        $crate::tenure_kit!(@area processes, tenure_process_conformance, $factory);
        $crate::tenure_kit!(@area queue_processes, tenure_queue_process_conformance, $factory);
        $crate::tenure_kit!(@area network, tenure_network_conformance, $factory);
        $crate::tenure_kit!(@area restart, tenure_restart_conformance, $factory);
        $crate::tenure_kit!(@area deployment, tenure_deployment_conformance, $factory);
    };
    (@area $area:ident, $suite:ident, $factory:expr) => {
        mod $area {
            #[allow(unused_imports)]
            use super::*;

            $crate::$suite!($factory);
        }
    };
}
