//! docs/mount.md's option table, rendered from `OPTIONS`. A test fails when
//! the page's table is not this rendering; `UPDATE_DOCS=1 cargo test -p
//! mountd option_table` writes it there.

use super::table::{Initial, IGNORED, OPTIONS};

/// The line before the table in docs/mount.md.
pub const BEGIN: &str =
    "<!-- The option table is generated from mountd/src/mountopts/table.rs: edit it there. -->";
/// The line after it.
pub const END: &str = "<!-- End of the generated option table. -->";

/// The Markdown table of every option.
pub fn markdown() -> String {
    let mut out = String::from("| option | default | meaning |\n|---|---|---|\n");
    for o in OPTIONS {
        let name = match o.arg {
            "" => format!("`{}`", o.name),
            arg => format!("`{}={arg}`", o.name),
        };
        let default = match o.default {
            Initial::Is(v) => format!("`{v}`"),
            Initial::Text(t) => t.to_string(),
            Initial::Off => "off".to_string(),
        };
        out.push_str(&format!("| {name} | {default} | {} |\n", o.doc));
    }
    let ignored: Vec<String> = IGNORED.iter().map(|k| format!("`{k}`")).collect();
    out.push_str(&format!(
        "| {}, `x-*` | | accepted and ignored (mount(8) and fstab pass them) |\n",
        ignored.join(", ")
    ));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{markdown, BEGIN, END};

    #[test]
    fn option_table_in_docs_is_the_declared_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mount.md");
        let page = std::fs::read_to_string(path).unwrap();
        let start = page
            .find(BEGIN)
            .expect("docs/mount.md: the table's BEGIN line")
            + BEGIN.len()
            + 1;
        let end = page.find(END).expect("docs/mount.md: the table's END line");
        let want = markdown();
        if page[start..end] == want {
            return;
        }
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(path, format!("{}{want}{}", &page[..start], &page[end..])).unwrap();
            return;
        }
        panic!(
            "docs/mount.md's option table differs from mountd/src/mountopts/table.rs; \
             run `UPDATE_DOCS=1 cargo test -p mountd option_table` to write the declared one"
        );
    }
}
