//! Query parameters a backend reads off its URL before handing the rest to
//! its driver, and the refusal of those nobody reads: drivers drop a
//! parameter they do not know, so a typo (`?schmea=`) would otherwise
//! leave a setting at its default without a word.

use crate::{Error, ErrorKind, Result};

/// `url` without its query parameter `name`, and that parameter's value
/// (the last one, if repeated).
///
/// ```
/// use tenure_lease_core::backend::url::take_parameter;
///
/// assert_eq!(
///     take_parameter("postgres://h/db?sslmode=disable&schema=s", "schema"),
///     ("postgres://h/db?sslmode=disable".to_owned(), Some("s".to_owned()))
/// );
/// ```
pub fn take_parameter(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, found)) if key == name => {
                value = Some(found.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, value)
}

/// Refuses `url` when its query holds a parameter that is not in `known`
/// (an entry ending in `[`, such as `options[`, admits every name it
/// starts), naming the parameter, the closest known one when a typo is
/// likely, and the whole list; `what` names the URL's kind in the message.
/// Values are never shown: they may be secrets.
///
/// # Errors
///
/// [`ErrorKind::Config`] on the first unknown parameter.
///
/// ```
/// use tenure_lease_core::backend::url::refuse_unknown_parameters;
///
/// let known = ["schema", "sslmode", "options["];
/// assert!(refuse_unknown_parameters("postgres://h/db?schema=s&options[a]=b", "PostgreSQL", &known).is_ok());
/// let typo = refuse_unknown_parameters("postgres://h/db?schmea=s", "PostgreSQL", &known).unwrap_err();
/// assert!(typo.message().contains("did you mean `schema`"));
/// ```
pub fn refuse_unknown_parameters(url: &str, what: &str, known: &[&str]) -> Result<()> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    let query = query.split_once('#').map_or(query, |(query, _)| query);
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        let recognised = known.iter().any(|known| match known.strip_suffix('[') {
            Some(prefix) => name.starts_with(prefix) && name[prefix.len()..].starts_with('['),
            None => *known == name,
        });
        if recognised {
            continue;
        }
        let hint = closest(name, known)
            .map(|closest| format!(" (did you mean `{closest}`?)"))
            .unwrap_or_default();
        let list: Vec<String> = known
            .iter()
            .map(|known| match known.strip_suffix('[') {
                Some(prefix) => format!("`{prefix}[NAME]`"),
                None => format!("`{known}`"),
            })
            .collect();
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the {what} URL has the parameter `{name}`, which nothing reads{hint}; it takes {}",
                list.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The known name within two edits of `name` (a swap of neighbours
/// counting as one), if one is.
fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|known| known.trim_end_matches('['))
        .map(|known| (strsim::osa_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parameters_are_refused_with_the_closest_known_one() {
        let known = ["schema", "sslmode", "password", "options["];
        for url in [
            "postgres://h/db",
            "postgres://h/db?",
            "postgres://h/db?schema=s&sslmode=disable",
            "postgres://h/db?options[search_path]=a,b",
        ] {
            assert!(
                refuse_unknown_parameters(url, "PostgreSQL", &known).is_ok(),
                "{url}"
            );
        }
        for (url, named, hint) in [
            ("postgres://h/db?schmea=s", "`schema`", true),
            ("postgres://h/db?schema=s&namespce=x", "`namespce`", false),
            ("postgres://h/db?options=x", "`options`", false),
            ("postgres://h/db?optionsX[a]=b", "`optionsX[a]`", false),
            ("postgres://h/db?password=secret&bogus", "`bogus`", false),
        ] {
            let error = refuse_unknown_parameters(url, "PostgreSQL", &known).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
            let message = error.message();
            assert!(message.contains(named), "{url}: {message}");
            assert_eq!(
                message.contains("did you mean `schema`"),
                hint,
                "{url}: {message}"
            );
            assert!(!message.contains("secret"), "{url}: {message}");
            assert!(message.contains("`options[NAME]`"), "{url}: {message}");
        }
    }

    #[test]
    fn a_swap_of_neighbours_is_one_edit() {
        let known = ["schema", "namespace", "db"];
        assert_eq!(closest("schmea", &known), Some("schema"));
        assert_eq!(closest("namespce", &known), Some("namespace"));
        assert_eq!(closest("sslmode", &known), None);
    }

    #[test]
    fn the_parameter_is_taken_out_and_the_rest_kept() {
        let cases = [
            ("postgres://h/db?schema=s", ("postgres://h/db", Some("s"))),
            (
                "postgres://h/db?sslmode=disable&schema=s&x=1",
                ("postgres://h/db?sslmode=disable&x=1", Some("s")),
            ),
            (
                "postgres://h/db?sslmode=disable",
                ("postgres://h/db?sslmode=disable", None),
            ),
            ("postgres://h/db", ("postgres://h/db", None)),
        ];
        for (url, (base, value)) in cases {
            let (found_base, found_value) = take_parameter(url, "schema");
            assert_eq!(
                (found_base.as_str(), found_value.as_deref()),
                (base, value),
                "{url}"
            );
        }
    }
}
