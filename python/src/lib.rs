//! The Python package `tenure`: the native half (`tenure._tenure`).
//!
//! Python users import `tenure`, whose pure-Python modules hold what reads
//! best as Python (the answer dataclasses, the exception hierarchy, the
//! `async with` guard of held work) and re-export the classes defined here.
//! Every store call runs on one shared multi-threaded tokio runtime without
//! the GIL; its answer is converted to Python in one place
//! ([`convert`]), its errors in another ([`errors`]).

mod bridge;
mod concurrency;
mod convert;
mod election;
mod errors;
mod held;
mod keeper;
mod store;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _tenure(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(store::connect, module)?)?;
    module.add_class::<store::PyStore>()?;
    module.add_class::<bridge::PyInbox>()?;
    module.add_class::<keeper::PyKeeper>()?;
    module.add_class::<held::PyHeld>()?;
    module.add_class::<held::PyRun>()?;
    module.add_class::<held::PyJobRun>()?;
    module.add_class::<concurrency::PyRunningJob>()?;
    module.add_class::<election::PyElection>()?;
    module.add_class::<election::PySchedule>()?;
    module.add_class::<election::PyTerm>()?;
    module.add_class::<election::PyFiring>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
