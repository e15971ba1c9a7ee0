//! Runs `examples/fenced_write.rs`, so the example cannot rot: it fails
//! unless the stale owner's late write is refused by the database and the
//! current owner's write is what the table holds.

#[path = "../../examples/fenced_write.rs"]
mod example;

#[test]
fn the_stale_owners_late_write_is_refused_by_the_database() {
    example::main().expect("the fenced_write example runs to its end");
}
