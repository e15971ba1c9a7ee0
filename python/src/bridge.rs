//! Between tokio and the caller's asyncio event loop.
//!
//! Every store call runs on one multi-threaded tokio runtime. A call is
//! polled once on the caller's thread first (with the GIL released): what
//! the store answers at once (the in-memory store, a refused input) is
//! answered without any thread hop, and a network request is on the wire
//! before a tokio worker even wakes. What is left runs as a tokio task.
//!
//! Answers come back through the loop's [`Inbox`]: a queue of jobs plus
//! one end of a socket pair the loop watches (`loop.add_reader`). A tokio
//! thread never takes the GIL: it queues a job and, when the queue was
//! empty, writes one byte; the loop's thread runs the jobs, converting each
//! answer to Python there. So answers that arrive together cost one wake of
//! the loop, no GIL changes hands between threads, and no tokio thread can
//! enter the interpreter while it finalizes (which would crash the
//! process).
//!
//! Three crossings use it:
//!
//! * [`spawn`]: a Rust future as an asyncio future of the caller's loop;
//!   cancelling the asyncio future aborts the Rust one.
//! * [`TaskWatch`]: when held work loses its lease (a Rust
//!   `CancellationToken` fires), the asyncio task running the work is
//!   cancelled in its own loop, and only while the work is still guarded.
//! * [`call_on_loop`]: a Python callback (recovery, an election's term, a
//!   tick's delivery) run as a task on the caller's loop and awaited from
//!   Rust; dropping the Rust future cancels the task.

use std::cell::RefCell;
use std::future::Future;
use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyDict, PyModule, PyTuple};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::errors;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The tokio runtime every store call and keeper task runs on.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("tenure-tokio")
            .build()
            // Only thread spawning can fail here: nothing could run at all.
            .unwrap_or_else(|error| panic!("cannot start tenure's tokio runtime: {error}"))
    })
}

/// Work for the loop's thread, queued from any thread.
type Job = Box<dyn for<'py> FnOnce(Python<'py>) + Send>;

/// One event loop's queue of jobs from tokio threads.
pub(crate) struct Inbox {
    jobs: Mutex<Vec<Job>>,
    /// Written (one byte) when a job lands in an empty queue.
    signal: UnixStream,
    /// The end the loop watches.
    wakeup: UnixStream,
}

impl Inbox {
    /// Queues `job` for the loop's thread. A loop that has closed never
    /// runs it (it is dropped with the inbox, on the thread that drops it).
    pub(crate) fn post(&self, job: impl for<'py> FnOnce(Python<'py>) + Send + 'static) {
        let was_empty = {
            let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.push(Box::new(job));
            jobs.len() == 1
        };
        if was_empty {
            // A full buffer already holds a wake-up; a closed loop wants none.
            let _ = (&self.signal).write(&[1]);
        }
    }
}

/// The event loop side of an [`Inbox`]: `tenure._bridge` registers
/// `run` as the reader of `fileno()` on each loop that makes calls.
#[pyclass(module = "tenure._tenure", name = "Inbox", frozen)]
pub(crate) struct PyInbox {
    inbox: Arc<Inbox>,
}

#[pymethods]
impl PyInbox {
    #[new]
    fn new() -> PyResult<Self> {
        let (signal, wakeup) = UnixStream::pair()?;
        signal.set_nonblocking(true)?;
        wakeup.set_nonblocking(true)?;
        Ok(PyInbox {
            inbox: Arc::new(Inbox {
                jobs: Mutex::new(Vec::new()),
                signal,
                wakeup,
            }),
        })
    }

    /// The descriptor the loop watches for readability.
    fn fileno(&self) -> i32 {
        self.inbox.wakeup.as_raw_fd()
    }

    /// Runs every queued job (called by the loop when `fileno` is readable).
    fn run(&self, py: Python<'_>) {
        // The wake-ups are drained before the queue is taken: a job queued
        // after the take writes a new one.
        let mut drained = [0_u8; 256];
        loop {
            let more = match (&self.inbox.wakeup).read(&mut drained) {
                Ok(read) => read == drained.len(),
                Err(error) => error.kind() == IoErrorKind::Interrupted,
            };
            if !more {
                break;
            }
        }
        let jobs = std::mem::take(
            &mut *self
                .inbox
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for job in jobs {
            // A job that panics (a bug) must not take the others' answers
            // with it; the panic is reported by the hook as it happens.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(py)));
        }
    }
}

thread_local! {
    /// The loop this thread ran last, and its inbox. The loop is held, so
    /// its address cannot be reused by a later loop while it is cached.
    static LAST_INBOX: RefCell<Option<(Py<PyAny>, Arc<Inbox>)>> = const { RefCell::new(None) };
}

static INBOX_OF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The inbox of `event_loop` (created and registered on first use).
pub(crate) fn inbox_of(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Inbox>> {
    let cached = LAST_INBOX.with_borrow(|last| {
        last.as_ref()
            .filter(|(known, _)| known.as_ptr() == event_loop.as_ptr())
            .map(|(_, inbox)| Arc::clone(inbox))
    });
    if let Some(inbox) = cached {
        return Ok(inbox);
    }
    let py = event_loop.py();
    let registered = INBOX_OF
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("tenure._bridge")?.getattr("inbox")?.unbind())
        })?
        .bind(py)
        .call1((event_loop,))?;
    let inbox = Arc::clone(&registered.cast::<PyInbox>()?.get().inbox);
    let previous = LAST_INBOX
        .with_borrow_mut(|last| last.replace((event_loop.clone().unbind(), Arc::clone(&inbox))));
    // Dropped here, attached, rather than inside the thread-local's borrow.
    drop(previous);
    Ok(inbox)
}

/// The caller's running event loop.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                PyModule::import(py, "asyncio")?
                    .getattr("get_running_loop")?
                    .unbind(),
            )
        })?
        .bind(py)
        .call0()
}

/// Why a call spawned with [`spawn`] failed, kept in Rust until it can be
/// raised in Python.
pub(crate) enum Failure {
    /// A store or keeper error, with the store's shown URL.
    Store(tenure::Error, Option<Arc<str>>),
    /// Held work `id` lost its lease for `cause`.
    Lost(String, &'static str),
}

impl Failure {
    pub(crate) fn store(error: tenure::Error, url: &Arc<str>) -> Self {
        Failure::Store(error, Some(Arc::clone(url)))
    }

    fn into_pyerr(self) -> PyErr {
        match self {
            Failure::Store(error, url) => errors::to_py(&error, url.as_deref()),
            Failure::Lost(id, cause) => errors::ownership_lost(&id, cause),
        }
    }
}

/// Resolves `future` (unless it was cancelled) with what `convert` makes of
/// `answer`.
fn resolve<T, C>(py: Python<'_>, future: &Bound<'_, PyAny>, answer: Result<T, Failure>, convert: C)
where
    C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Bound<'a, PyAny>>,
{
    let done = future
        .call_method0("done")
        .and_then(|done| done.is_truthy())
        .unwrap_or(true);
    if done {
        return;
    }
    let result = match answer.map_err(Failure::into_pyerr) {
        Ok(value) => {
            convert(py, value).and_then(|value| future.call_method1("set_result", (value,)))
        }
        Err(error) => future.call_method1("set_exception", (error.into_value(py),)),
    };
    if let Err(error) = result {
        // Only a future resolved meanwhile refuses: nothing awaits an answer.
        drop(error);
    }
}

/// Runs `call` and answers an asyncio future of the running loop that
/// resolves to `convert(answer)` (or raises the failure).
pub(crate) fn spawn<'py, T, F, C>(
    py: Python<'py>,
    call: F,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
{
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0("create_future")?;
    let mut call = Box::pin(call);
    let first = py.detach(|| {
        let _runtime = runtime().enter();
        call.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    });
    if let Poll::Ready(answer) = first {
        resolve(py, &future, answer, convert);
        return Ok(future);
    }
    let inbox = inbox_of(&event_loop)?;
    let target = future.clone().unbind();
    let task = runtime().spawn(async move {
        let answer = call.await;
        inbox.post(move |py| resolve(py, target.bind(py), answer, convert));
    });
    let abort = task.abort_handle();
    let on_done = PyCFunction::new_closure(
        py,
        Some(c"tenure_abort_if_cancelled"),
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
                abort.abort();
            }
            Ok(())
        },
    )?;
    future.call_method1("add_done_callback", (on_done,))?;
    Ok(future)
}

/// Where a watched task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// Guarded: a loss cancels the task.
    Watching,
    /// The loss happened; its cancel is on its way to the loop.
    Fired,
    /// The loss cancelled the task.
    Delivered,
    /// The guarded block ended first (before the loss, or before its cancel
    /// reached the task): no cancel is delivered from now on.
    Ended,
}

/// What [`TaskWatch::end`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchEnd {
    /// No loss while guarded.
    Held,
    /// The work lost its lease; its task was not cancelled (the block ended
    /// first).
    LostUncancelled,
    /// The work lost its lease and its task was cancelled.
    LostCancelled,
}

/// Cancels one asyncio task when a token fires, until [`end`](Self::end).
pub(crate) struct TaskWatch {
    state: Arc<Mutex<Watch>>,
    stop: CancellationToken,
}

impl TaskWatch {
    /// Watches `loss`: when it fires, `task` (of the running loop) is
    /// cancelled in the loop's thread.
    pub(crate) fn start(
        py: Python<'_>,
        loss: CancellationToken,
        task: Py<PyAny>,
    ) -> PyResult<TaskWatch> {
        let inbox = inbox_of(&running_loop(py)?)?;
        let state = Arc::new(Mutex::new(Watch::Watching));
        let stop = CancellationToken::new();
        let fired = Arc::clone(&state);
        let ended = stop.clone();
        runtime().spawn(async move {
            tokio::select! {
                () = loss.cancelled() => {}
                () = ended.cancelled() => return,
            }
            {
                let mut watch = fired.lock().unwrap_or_else(PoisonError::into_inner);
                if *watch != Watch::Watching {
                    return;
                }
                *watch = Watch::Fired;
            }
            inbox.post(move |py| {
                let mut watch = fired.lock().unwrap_or_else(PoisonError::into_inner);
                if *watch == Watch::Fired {
                    *watch = Watch::Delivered;
                    // A finished task ignores it.
                    let _ = task.bind(py).call_method0("cancel");
                }
            });
        });
        Ok(TaskWatch { state, stop })
    }

    /// Ends the watch (call it from the loop's thread); says whether the
    /// work lost its lease while watched and whether its task was
    /// cancelled for it.
    pub(crate) fn end(self) -> WatchEnd {
        self.stop.cancel();
        let mut watch = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let found = *watch;
        *watch = Watch::Ended;
        match found {
            Watch::Watching | Watch::Ended => WatchEnd::Held,
            Watch::Fired => WatchEnd::LostUncancelled,
            Watch::Delivered => WatchEnd::LostCancelled,
        }
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The asyncio task of a callback, cancelled when the Rust side stops
/// waiting for it.
struct CancelOnDrop {
    inbox: Arc<Inbox>,
    task: Arc<Mutex<Option<Py<PyAny>>>>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let task = Arc::clone(&self.task);
        self.inbox.post(move |py| {
            let task = task.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(task) = task {
                let _ = task.bind(py).call_method0("cancel");
            }
        });
    }
}

/// Runs `callback(argument(py))` (an `async def`) as a task on the loop of
/// `inbox` and answers how it ended (what it raised, as text). Dropping the
/// returned future cancels the task; so does `given_up` (the loop stalled
/// or closed: nothing would run the callback, or tell it to stop).
pub(crate) async fn call_on_loop<A>(
    inbox: &Arc<Inbox>,
    callback: &Arc<Py<PyAny>>,
    given_up: CancellationToken,
    argument: A,
) -> Result<(), String>
where
    A: for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
{
    let (answer, answered) = oneshot::channel::<Result<(), String>>();
    let task = Arc::new(Mutex::new(None));
    let _cancel = CancelOnDrop {
        inbox: Arc::clone(inbox),
        task: Arc::clone(&task),
    };
    let callback = Arc::clone(callback);
    inbox.post(move |py| {
        let answer = Arc::new(Mutex::new(Some(answer)));
        let send = move |result: Result<(), String>| {
            if let Some(answer) = answer.lock().unwrap_or_else(PoisonError::into_inner).take() {
                let _ = answer.send(result);
            }
        };
        let started = (|| -> PyResult<()> {
            let coroutine = callback.bind(py).call1((argument(py)?,))?;
            let started = running_loop(py)?.call_method1("create_task", (coroutine,))?;
            let done = send.clone();
            let on_done = PyCFunction::new_closure(
                py,
                Some(c"tenure_callback_done"),
                None,
                move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                    let result = args.get_item(0)?.call_method0("result");
                    done(result.map(drop).map_err(|error| error.to_string()));
                    Ok(())
                },
            )?;
            started.call_method1("add_done_callback", (on_done,))?;
            *task.lock().unwrap_or_else(PoisonError::into_inner) = Some(started.unbind());
            Ok(())
        })();
        if let Err(error) = started {
            send(Err(error.to_string()));
        }
    });
    tokio::select! {
        answer = answered => answer
            .unwrap_or_else(|_| Err("the event loop closed before the callback finished".to_owned())),
        () = given_up.cancelled() => Err(
            "the event loop stalled past loop_stall_limit: the callback's lease is given up".to_owned(),
        ),
    }
}
