//! What the `tenure` binary does with what it should refuse: usage errors,
//! malformed URLs, servers that are down, ids that do not exist; and the
//! memory backend, where each invocation opens a new empty store.

use crate::support;

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use predicates::prelude::*;
use predicates::str::contains;

use support::{free_port, tenure, tenure_bare};

#[test]
fn every_command_has_help() {
    let help = tenure_bare(&["--help"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let help = String::from_utf8_lossy(&help);
    let commands = [
        "leases",
        "show",
        "take-over",
        "release",
        "cancel",
        "purge",
        "jobs",
        "retry",
        "enqueue",
        "migrate",
        "check",
        "watch",
    ];
    for command in commands {
        assert!(help.contains(command), "{command} missing from\n{help}");
        tenure_bare(&[command, "--help"])
            .assert()
            .success()
            .stdout(contains("Usage: tenure"));
    }
    assert!(
        help.contains("TENURE_URL") && help.contains("Exit codes"),
        "{help}"
    );
}

#[test]
fn usage_errors_exit_2() {
    tenure_bare(&["leases"])
        .assert()
        .code(2)
        .stderr(contains("--url URL or the environment variable TENURE_URL"));
    tenure("memory:", &["no-such-command"]).assert().code(2);
    tenure("memory:", &["purge", "--older-than", "soon"])
        .assert()
        .code(2)
        .stderr(contains("30s, 5m, 2h or 7d"));
    tenure("memory:", &["purge"]).assert().code(2);
    tenure(
        "memory:",
        &["take-over", "x", "--adopt", "--ttl", "forever"],
    )
    .assert()
    .code(2);
    tenure(
        "memory:",
        &["take-over", "x", "--fail", "r", "--adopt", "--ttl", "1m"],
    )
    .assert()
    .code(2);
    tenure("memory:", &["enqueue", "q", "--payload", "{\"a\":"])
        .assert()
        .code(2)
        .stderr(contains("not JSON"));
    tenure("memory:", &["jobs", "--dead"])
        .assert()
        .code(2)
        .stderr(contains("--queue"));
}

#[test]
fn a_malformed_url_says_which_are_accepted() {
    for url in ["nonsense", "ftp://host/x", "memory:extra"] {
        tenure(url, &["leases"])
            .assert()
            .code(2)
            .stderr(contains("memory:").and(contains("config")));
    }
}

#[test]
fn a_misspelt_url_parameter_exits_2_for_every_command_before_anything_is_reached() {
    let postgres = format!(
        "postgres://app:hunter2@127.0.0.1:{}/jobs?schmea=s",
        free_port()
    );
    let redis = format!("redis://:hunter2@127.0.0.1:{}/?namespce=n", free_port());
    let commands: [&[&str]; 5] = [
        &["leases"],
        &["migrate"],
        &["check"],
        &["take-over", "some-id", "--fail", "operator"],
        &["purge", "--older-than", "1d"],
    ];
    for (url, meant) in [(&postgres, "`schema`"), (&redis, "`namespace`")] {
        for command in commands {
            tenure(url, command).assert().code(2).stderr(
                contains(meant)
                    .and(contains("config"))
                    .and(contains("hunter2").not()),
            );
        }
    }
}

#[test]
fn the_url_flag_wins_over_the_environment() {
    tenure_bare(&["--url", "memory:", "leases"])
        .env("TENURE_URL", "nonsense")
        .assert()
        .success();
    tenure_bare(&["leases"])
        .env("TENURE_URL", "memory:")
        .assert()
        .success();
}

#[test]
fn a_redis_server_that_is_down_exits_3_without_the_password() {
    let url = format!("redis://:hunter2@127.0.0.1:{}", free_port());
    tenure(&url, &["leases"]).assert().code(3).stderr(
        contains("unavailable")
            .and(contains("check that the server is running"))
            .and(contains("hunter2").not()),
    );
}

#[test]
fn a_postgres_server_that_is_down_exits_3_without_the_password() {
    let url = format!("postgres://app:hunter2@127.0.0.1:{}/jobs", free_port());
    for command in [&["leases"][..], &["migrate"], &["check"]] {
        tenure(&url, command).assert().code(3).stderr(
            contains("unavailable")
                .and(contains("then retry"))
                .and(contains("hunter2").not()),
        );
    }
}

#[test]
fn a_memory_store_starts_empty_every_time() {
    let url = "memory:";
    tenure(url, &["leases"])
        .assert()
        .success()
        .stdout("no lease records\n");
    tenure(url, &["leases", "--expired", "--json"])
        .assert()
        .success()
        .stdout("[]\n");
    tenure(url, &["show", "run-1"])
        .assert()
        .code(1)
        .stderr(contains("no lease record or job"));
    tenure(url, &["take-over", "run-1", "--fail", "x"])
        .assert()
        .code(1)
        .stderr(contains("no lease record with that id"));
    tenure(url, &["retry", "job-1"])
        .assert()
        .code(1)
        .stderr(contains("no job has the id"));
    tenure(url, &["jobs", "--queue", "q", "--dead", "--json"])
        .assert()
        .success()
        .stdout("[]\n");
    tenure(url, &["enqueue", "q", "--payload", "{}", "--id", "job-1"])
        .assert()
        .success()
        .stdout("job-1\n");
    tenure(url, &["purge", "--older-than", "1d", "--json"])
        .assert()
        .success()
        .stdout(contains("\"leases\": 0"));
    tenure(url, &["migrate"]).assert().success();
    tenure(url, &["check"])
        .assert()
        .success()
        .stdout(contains("persistence").and(contains("warn")));
    tenure(url, &["watch", "--once"])
        .assert()
        .success()
        .stdout(contains("tenure watch: 0 active"));
    tenure(url, &["show", "x", "--json"]).assert().code(1);
}

#[test]
fn an_invalid_id_is_a_usage_error() {
    tenure("memory:", &["show", ""])
        .assert()
        .code(2)
        .stderr(contains("invalid_input"));
}

#[test]
fn watch_stops_cleanly_on_ctrl_c() {
    let binary = assert_cmd::cargo::cargo_bin("tenure");
    let mut child = std::process::Command::new(binary)
        .env_remove("TENURE_URL")
        .args(["--url", "memory:", "watch", "--interval", "1h"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tenure watch starts");
    // The first view is printed once the signal handler is in place.
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut first)
        .expect("a first view");
    assert!(first.contains("tenure watch"), "{first}");
    let interrupt = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupt.success());
    let status = child.wait().expect("tenure watch exits");
    assert_eq!(status.code(), Some(0), "{status:?}");
}
