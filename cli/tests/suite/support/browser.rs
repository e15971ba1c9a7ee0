//! A real browser for the web view's tests: headless Chromium, driven over
//! WebDriver by a chromedriver of the test's own on a free loopback port.
//!
//! [`start`] finds the programs: chromedriver is `TENURE_CHROMEDRIVER`,
//! else `/usr/bin/chromedriver`, else `chromedriver` on `PATH`; Chromium is
//! `TENURE_CHROMIUM`, else `/usr/bin/chromium`, else `chromium` on `PATH`.
//! Without them the test reports itself skipped with what to install, and
//! fails when `TENURE_REQUIRE_SERVICES=1`.
//!
//! chromedriver runs in a process group of its own, which the Chromium it
//! starts joins: dropping the [`Browser`] (or [`Browser::close`]) kills the
//! whole group, so no browser outlives its test, even when the test
//! panics; a watchdog shell does the same (and removes the files below)
//! if the test process dies without unwinding. Chromium's profile, its
//! home directory (`HOME`, where it keeps crash reports and caches) and
//! chromedriver's log live in a fresh temporary directory, removed
//! afterwards. Chromium is started with everything that would reach out to
//! the network turned off, so its only traffic is the test's, on loopback.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// The variable naming the chromedriver program to run.
const CHROMEDRIVER_VAR: &str = "TENURE_CHROMEDRIVER";

/// The variable naming the Chromium program chromedriver drives.
const CHROMIUM_VAR: &str = "TENURE_CHROMIUM";

/// What provides both programs, on Debian.
const INSTALL: &str = "apt-get install chromium chromium-driver";

/// How long chromedriver may take to listen on its port (the machine may
/// be loaded).
const LISTEN_BOUND: Duration = Duration::from_secs(30);

/// How long Chromium may take to start and open a session, or to close it.
const SESSION_BOUND: Duration = Duration::from_secs(60);

/// Pause between two checks of a starting or stopping process.
const POLL: Duration = Duration::from_millis(100);

/// How long the processes get to exit after SIGTERM, before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// Chromium's arguments besides its profile directory: headless, without
/// the sandbox (which needs privileges a container lacks), and without
/// anything that reaches out to the network unasked.
///
/// Not `--disable-crashpad-for-testing`, though its crash handlers leave
/// the process group: with it, Chromium 156's renderer never answers a
/// navigation. The handlers exit by themselves once Chromium is gone.
const CHROMIUM_ARGS: [&str; 12] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
];

/// A headless Chromium driven over WebDriver for one test, its chromedriver
/// stopped when dropped.
pub struct Browser {
    /// Dropped first: the session's task ends with it.
    client: Client,
    /// Stopped on drop, with every process of its group.
    driver: Driver,
    /// Chromium's profile and home, and chromedriver's log; removed last,
    /// once nothing writes there any more.
    _files: tempfile::TempDir,
}

/// Starts chromedriver (`TENURE_CHROMEDRIVER` or `/usr/bin/chromedriver`,
/// else `chromedriver` on `PATH`) on a free loopback port and opens a
/// session of headless Chromium (`TENURE_CHROMIUM` or `/usr/bin/chromium`,
/// else `chromium` on `PATH`).
///
/// Returns `None` after reporting `test` skipped, with what to install
/// (`apt-get install chromium chromium-driver`), when either program is
/// missing.
///
/// # Panics
///
/// When a program is missing and `TENURE_REQUIRE_SERVICES=1`; when
/// chromedriver does not listen, or the session does not open, in time
/// (the message holds chromedriver's log).
pub async fn start(test: &str) -> Option<Browser> {
    let (chromedriver, chromium) = match programs() {
        Ok(programs) => programs,
        Err(why) => {
            tenure::conformance::skip_unless_required(test, &why);
            return None;
        }
    };
    let files = tempfile::Builder::new()
        .prefix("tenure-browser-")
        .tempdir()
        .expect("a temporary directory for the browser");
    let profile = files.path().join("profile");
    let port = super::free_port();
    let driver = Driver::spawn(&chromedriver, port, files.path());
    driver.wait_until_listening(port).await;

    let mut arguments: Vec<String> = CHROMIUM_ARGS.iter().map(|&arg| arg.to_owned()).collect();
    arguments.push(format!("--user-data-dir={}", profile.display()));
    let capabilities = serde_json::json!({
        "goog:chromeOptions": {
            "binary": chromium,
            "args": arguments,
        },
    });
    let serde_json::Value::Object(capabilities) = capabilities else {
        unreachable!("the capabilities are a JSON object")
    };
    // Plain HTTP to loopback: no TLS connector needed.
    let mut builder = ClientBuilder::new(HttpConnector::new());
    builder.capabilities(capabilities);
    let url = format!("http://127.0.0.1:{port}");
    let session = builder.connect(&url);
    let client = match tokio::time::timeout(SESSION_BOUND, session).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => panic!(
            "Chromium's WebDriver session did not open: {error}\n{}",
            driver.log_tail()
        ),
        Err(_) => panic!(
            "Chromium's WebDriver session did not open within {SESSION_BOUND:?}\n{}",
            driver.log_tail()
        ),
    };
    Some(Browser {
        client,
        driver,
        _files: files,
    })
}

impl Browser {
    /// The WebDriver client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sets the window's size in CSS pixels (e.g. 390x844 for a phone):
    /// the size of its viewport, what the page lays out in (headless
    /// Chromium's window has a frame too, of some 140 pixels' height).
    ///
    /// # Panics
    ///
    /// When the browser refuses, or the viewport does not end up that size.
    pub async fn resize(&self, width: u32, height: u32) {
        self.set_window_size(width, height).await;
        let (inner_width, inner_height) = self.viewport().await;
        if (inner_width, inner_height) == (width, height) {
            return;
        }
        let (outer_width, outer_height) = self
            .client
            .get_window_size()
            .await
            .unwrap_or_else(|error| panic!("the window's size is unknown: {error}"));
        let frame = |outer: u64, inner: u32| {
            u32::try_from(outer.saturating_sub(inner.into())).unwrap_or_default()
        };
        self.set_window_size(
            width + frame(outer_width, inner_width),
            height + frame(outer_height, inner_height),
        )
        .await;
        let viewport = self.viewport().await;
        assert_eq!(
            viewport,
            (width, height),
            "the viewport is not resized to {width}x{height}"
        );
    }

    /// Sets the outer size of the window.
    async fn set_window_size(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|error| {
                panic!("the window is not resized to {width}x{height}: {error}")
            });
    }

    /// The viewport's width and height, in CSS pixels.
    async fn viewport(&self) -> (u32, u32) {
        let size = self
            .client
            .execute(
                "return [window.innerWidth, window.innerHeight];",
                Vec::new(),
            )
            .await
            .unwrap_or_else(|error| panic!("the viewport's size is unknown: {error}"));
        let pixels = |index: usize| {
            size.get(index)
                .and_then(serde_json::Value::as_u64)
                .and_then(|pixels| u32::try_from(pixels).ok())
                .unwrap_or_else(|| panic!("the viewport's size is not a pair of numbers: {size}"))
        };
        (pixels(0), pixels(1))
    }

    /// Saves a PNG screenshot of the current page as `<dir>/<name>.png`,
    /// where `<dir>` is `serve-screenshots` in cargo's temporary directory
    /// for integration tests (created if missing), and returns its path.
    ///
    /// # Panics
    ///
    /// When the browser takes no screenshot or the file is not written.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|error| panic!("no screenshot {name}: {error}"));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|error| panic!("{} is not created: {error}", dir.display()));
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)
            .unwrap_or_else(|error| panic!("{} is not written: {error}", path.display()));
        path
    }

    /// Ends the WebDriver session (closing Chromium) and stops chromedriver.
    ///
    /// # Panics
    ///
    /// When the session does not end (in time); chromedriver and Chromium
    /// are stopped all the same.
    pub async fn close(self) {
        let Browser {
            client,
            driver,
            _files: files,
        } = self;
        let closed = tokio::time::timeout(SESSION_BOUND, client.close()).await;
        drop(driver);
        drop(files);
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("the WebDriver session did not end: {error}"),
            Err(_) => panic!("the WebDriver session did not end within {SESSION_BOUND:?}"),
        }
    }
}

/// The paths of chromedriver and Chromium, or why the test cannot have
/// them.
fn programs() -> Result<(PathBuf, PathBuf), String> {
    let chromedriver = program(CHROMEDRIVER_VAR, "/usr/bin/chromedriver", "chromedriver");
    let chromium = program(CHROMIUM_VAR, "/usr/bin/chromium", "chromium");
    match (chromedriver, chromium) {
        (Ok(chromedriver), Ok(chromium)) => Ok((chromedriver, chromium)),
        (chromedriver, chromium) => {
            let missing: Vec<String> = [chromedriver.err(), chromium.err()]
                .into_iter()
                .flatten()
                .collect();
            Err(format!(
                "{}: install Chromium and its WebDriver (Debian: {INSTALL}) \
                 or set {CHROMIUM_VAR} and {CHROMEDRIVER_VAR}",
                missing.join(" and ")
            ))
        }
    }
}

/// The program the variable `var` names, else `default`, else `name` on
/// `PATH`; or what is missing.
fn program(var: &str, default: &str, name: &str) -> Result<PathBuf, String> {
    if let Some(named) = std::env::var_os(var).filter(|value| !value.is_empty()) {
        let named = PathBuf::from(named);
        return if executable(&named) {
            Ok(named)
        } else {
            Err(format!("{var}={} is not a program", named.display()))
        };
    }
    let default = Path::new(default);
    if executable(default) {
        return Ok(default.to_owned());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| format!("{name} is not installed"))
}

/// Whether `path` is a file someone may execute.
fn executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// A chromedriver in a process group of its own, and the watchdog that
/// kills the group should the test process die without dropping it.
struct Driver {
    /// chromedriver, the group's leader: its PID is the group's ID, which
    /// stays reserved until it is reaped, after the group's last kill.
    process: Child,
    /// A shell that kills the group once the test process's end closes its
    /// input; killed itself when the driver stops normally.
    watchdog: Option<Child>,
    /// chromedriver's output (and Chromium's).
    log: PathBuf,
}

impl Driver {
    /// Starts `program` on loopback port `port`, with `home` in `files` as
    /// the home directory (its own and Chromium's), its output going to
    /// `chromedriver.log` there.
    fn spawn(program: &Path, port: u16, files: &Path) -> Driver {
        let log = files.join("chromedriver.log");
        let output = std::fs::File::create(&log)
            .unwrap_or_else(|error| panic!("{} is not created: {error}", log.display()));
        let errors = output.try_clone().expect("the log file's handle is cloned");
        let process = Command::new(program)
            .arg(format!("--port={port}"))
            .env("HOME", files.join("home"))
            .stdin(Stdio::null())
            // Never the test's own output: `cargo test` reads it until
            // every holder has closed it.
            .stdout(output)
            .stderr(errors)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("{} does not start: {error}", program.display()));
        let mut driver = Driver {
            process,
            watchdog: None,
            log,
        };
        // Deaf to the signals that end a test run (`timeout` signals its
        // whole process group, Ctrl-C the terminal's): it must outlive the
        // test process to act. The `kill` program, as dash's own takes no
        // process group. The files go too, once Chromium's crash handlers
        // (outside the group) have seen it die.
        let group = driver.process.id();
        let script = format!(
            "trap '' HUP INT TERM; read _ignored; \
             env kill -KILL -- -{group} 2>/dev/null; sleep 1; rm -rf -- \"$1\""
        );
        driver.watchdog = Command::new("sh")
            .args(["-c", &script, "sh"])
            .arg(files)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        driver
    }

    /// Waits (at most [`LISTEN_BOUND`]) until chromedriver accepts
    /// connections on `port`.
    async fn wait_until_listening(&self, port: u16) {
        let give_up = Instant::now() + LISTEN_BOUND;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                !exited(self.process.id()),
                "chromedriver exited before it listened on port {port}\n{}",
                self.log_tail()
            );
            assert!(
                Instant::now() < give_up,
                "chromedriver did not listen on port {port} within {LISTEN_BOUND:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The end of chromedriver's log, for a failure's message.
    fn log_tail(&self) -> String {
        const TAIL_BYTES: usize = 4000;
        let text = std::fs::read(&self.log).unwrap_or_default();
        let tail = &text[text.len().saturating_sub(TAIL_BYTES)..];
        format!(
            "chromedriver's log ({}), last lines:\n{}",
            self.log.display(),
            String::from_utf8_lossy(tail)
        )
    }
}

impl Drop for Driver {
    /// Sends the group SIGTERM, gives it [`TERM_GRACE`] to exit, sends it
    /// SIGKILL, then reaps chromedriver and the watchdog.
    fn drop(&mut self) {
        let group = self.process.id();
        signal_group("-TERM", group);
        let give_up = Instant::now() + TERM_GRACE;
        while group_running(group) && Instant::now() < give_up {
            std::thread::sleep(POLL);
        }
        // chromedriver is not reaped yet, so the group's ID is still its.
        signal_group("-KILL", group);
        let _ = self.process.wait();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Sends `signal` (`-TERM`, `-KILL`) to every process of the group `group`.
fn signal_group(signal: &str, group: u32) {
    let _ = Command::new("kill")
        .args([signal, "--", &format!("-{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The fields of `/proc/<pid>/stat` after the command name (which is in
/// parentheses and may hold spaces): state, parent, group, ...
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(") ")?;
    Some(fields.split(' ').map(str::to_owned).collect())
}

/// Whether the process `pid` has exited (it is gone, or a zombie nobody
/// has reaped yet).
fn exited(pid: u32) -> bool {
    stat_fields(&pid.to_string())
        .is_none_or(|fields| fields.first().is_none_or(|state| state == "Z"))
}

/// Whether a process of the group `group` is still running (zombies
/// aside).
fn group_running(group: u32) -> bool {
    let group = group.to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let pid = entry.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        stat_fields(pid).is_some_and(|fields| {
            fields.first().is_some_and(|state| state != "Z") && fields.get(2) == Some(&group)
        })
    })
}
