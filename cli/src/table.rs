//! Plain text tables: a header row and left-aligned columns as wide as
//! their widest cell.

/// A table being filled, row by row.
pub(crate) struct Table<const N: usize> {
    header: [String; N],
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub(crate) fn new(header: [&str; N]) -> Self {
        Table {
            header: header.map(str::to_owned),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells);
    }

    /// The table, or `empty` when it has no rows.
    pub(crate) fn render_or(&self, empty: &str) -> String {
        if self.rows.is_empty() {
            return empty.to_owned();
        }
        let mut widths = self.header.clone().map(|cell| cell.chars().count());
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (index, (cell, width)) in row.iter().zip(widths).enumerate() {
                if index > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if index + 1 < N {
                    line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = Table::new(["ID", "STATUS"]);
        table.row(["run-1".to_owned(), "running".to_owned()]);
        table.row(["r".to_owned(), "-".to_owned()]);
        assert_eq!(
            table.render_or("none"),
            "ID     STATUS\nrun-1  running\nr      -\n"
        );
        assert_eq!(Table::new(["A"]).render_or("none\n"), "none\n");
    }
}
