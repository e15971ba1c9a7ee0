//! The kit's variant cases on servers whose `sql_mode` differs from the
//! shared one's: none at all (no strict mode: a value that does not fit is
//! truncated with a warning instead of refused) and the strictest with
//! ANSI quoting. The store binds every value and quotes no identifier with
//! `"`, so its answers must not change. Each runs on a private MariaDB of
//! this binary, started on first use.

use tenure_test_support::per_binary::PerBinary;
use tenure_test_support::servers::PrivateMariadb;

use crate::support::MySqlFactory;

static NON_STRICT: PerBinary<PrivateMariadb> = PerBinary::new();
static STRICTEST: PerBinary<PrivateMariadb> = PerBinary::new();

/// A factory on `server` (started with `sql_mode` on first use).
fn on_private(server: &'static PerBinary<PrivateMariadb>, sql_mode: &'static str) -> MySqlFactory {
    if let Some(why) = PrivateMariadb::unavailable_reason() {
        return MySqlFactory::unavailable(why);
    }
    MySqlFactory::on_url(
        server
            .get_or_start("a private MariaDB", move || async move {
                PrivateMariadb::start_with(&[&format!("--sql-mode={sql_mode}")]).await
            })
            .map(PrivateMariadb::url),
    )
}

mod non_strict {
    tenure_conformance::tenure_variant_conformance!(super::on_private(&super::NON_STRICT, ""));
}

mod strictest {
    tenure_conformance::tenure_variant_conformance!(super::on_private(
        &super::STRICTEST,
        "TRADITIONAL,ANSI_QUOTES,ONLY_FULL_GROUP_BY,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH"
    ));
}
