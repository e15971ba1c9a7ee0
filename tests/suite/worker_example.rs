//! `examples/worker.rs` is the README's worker: it must still be quoted
//! there whole, and run twice on one store (each run a new id, so the
//! second is not `AlreadyExists`). The README's count of the kit's cases
//! must be the kit's.

// Its `main` reads the command line; the tests call `run`.
#[allow(dead_code)]
#[path = "../../examples/worker.rs"]
mod example;

#[test]
fn the_readme_quotes_the_worker_whole() {
    let readme = include_str!("../../README.md");
    let worker = include_str!("../../examples/worker.rs");
    let quoted = format!("```rust,no_run\n{worker}```");
    assert!(
        readme.contains(&quoted),
        "README.md's keeper section no longer quotes examples/worker.rs: paste the file again"
    );
}

#[test]
fn the_readme_counts_the_kits_cases_as_the_kit_does() {
    type Store = tenure::memory::MemoryStore;
    let counted = format!(
        "({} lease, {} gate and {} queue cases,",
        tenure_conformance::cases::<Store>().len(),
        tenure_conformance::gate_cases::<Store>().len(),
        tenure_conformance::queue_cases::<Store>().len(),
    );
    let readme = include_str!("../../README.md").replace('\n', " ");
    assert!(
        readme.contains(&counted),
        "README.md's \"Writing a backend\" no longer counts the kit's cases: write {counted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_runs_again_on_the_same_store() -> tenure::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("worker.db").display());
    example::run(&url).await?;
    example::run(&url).await?;

    let store = tenure::connect(&url).await?;
    let runs = tenure::LeaseStore::list_by_scope(&*store, "report:nightly").await?;
    assert_eq!(runs.len(), 2, "two runs, two records: {runs:?}");
    assert!(
        runs.iter()
            .all(|run| run.status == tenure::Status::Succeeded),
        "both runs finished: {runs:?}"
    );
    Ok(())
}
