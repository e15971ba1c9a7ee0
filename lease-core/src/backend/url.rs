//! Query parameters a backend reads off its URL before handing the rest to
//! its driver (which would reject, or silently drop, a parameter it does
//! not know).

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

#[cfg(test)]
mod tests {
    use super::*;

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
