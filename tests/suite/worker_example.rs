//! `examples/worker.rs` is the worker the README points to: the guide
//! (GUIDE.md, whose keeper section the README links to) must still quote it
//! whole, and it must run twice on one store (each run a new id, so the
//! second is not `AlreadyExists`). The backend author's guide
//! (backend-file/WRITING_A_BACKEND.md, linked from the README) must count
//! the kit's cases as the kit does.

// Its `main` reads the command line; the tests call `run`.
#[allow(dead_code)]
#[path = "../../examples/worker.rs"]
mod example;

#[test]
fn the_guide_quotes_the_worker_whole() {
    let guide = include_str!("../../GUIDE.md");
    let worker = include_str!("../../examples/worker.rs");
    let quoted = format!("```rust,no_run\n{worker}```");
    assert!(
        guide.contains(&quoted),
        "GUIDE.md's keeper section no longer quotes examples/worker.rs: paste the file again"
    );
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains("(examples/worker.rs)")
            && readme.contains("(GUIDE.md#the-keeper-heartbeats-that-fail-closed)"),
        "README.md no longer points to examples/worker.rs and the guide's keeper section"
    );
}

#[test]
fn the_backend_guide_counts_the_kits_cases_as_the_kit_does() {
    type Store = tenure::memory::MemoryStore;
    let counted = format!(
        "({} lease, {} gate and {} queue cases,",
        tenure_conformance::cases::<Store>().len(),
        tenure_conformance::gate_cases::<Store>().len(),
        tenure_conformance::queue_cases::<Store>().len(),
    );
    let guide = include_str!("../../backend-file/WRITING_A_BACKEND.md").replace('\n', " ");
    assert!(
        guide.contains(&counted),
        "backend-file/WRITING_A_BACKEND.md no longer counts the kit's cases: write {counted}"
    );
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains("(backend-file/WRITING_A_BACKEND.md)"),
        "README.md no longer links to the backend author's guide"
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
