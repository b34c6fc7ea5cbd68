//! What every page shares: escaping, the page's frame and its style (all
//! inline, so that the pages work with no network).

/// `s` safe inside HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            // Control characters are not allowed in XML (the SVG), even
            // as references: show them as \xNN.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r')
                || c == '\u{FFFE}'
                || c == '\u{FFFF}' =>
            {
                let _ = std::fmt::Write::write_fmt(&mut o, format_args!("\\x{:02x}", c as u32));
            }
            c => o.push(c),
        }
    }
    o
}

/// A byte count for people.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:20px;margin:0 0 .3em}h2{font-size:16px;margin:1.4em 0 .4em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#eef}td.n{text-align:right;font-variant-numeric:tabular-nums}nav a{margin-right:1em}\
.bar{display:inline-block;width:120px;height:10px;background:#ddd;vertical-align:middle}\
.bar i{display:block;height:10px;background:#4a8}.muted{color:#888}code{font-size:12px}\
.ok{color:#070}.bad{color:#b00;font-weight:bold}";

/// A whole page: `title`, refreshed every `refresh` seconds.
pub fn frame(title: &str, refresh: u32, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{refresh}\">\
         <title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>\
         <nav><a href=\"/\">status</a><a href=\"/keyviz\">key visualizer</a><a href=\"/metrics\">metrics</a></nav>\
         {body}<p class=\"muted\">refreshes every {refresh} s</p></body></html>",
        t = esc(title)
    )
}

/// A progress bar of `done` out of `total`.
pub fn bar(done: u64, total: u64) -> String {
    if total == 0 {
        return "<span class=\"muted\">idle</span>".into();
    }
    let pct = if total == 0 {
        0.0
    } else {
        (done as f64 * 100.0 / total as f64).min(100.0)
    };
    format!("<span class=\"bar\" title=\"{pct:.0}%\"><i style=\"width:{pct:.0}%\"></i></span> {pct:.0}%")
}

/// `MICROS text` (a master's event) with the time as `HH:MM:SS UTC`.
pub fn event(e: &str) -> String {
    match e.split_once(' ') {
        Some((t, rest)) => match t.parse::<u64>() {
            Ok(us) => {
                let s = us / 1_000_000;
                format!(
                    "{:02}:{:02}:{:02} UTC {}",
                    s / 3600 % 24,
                    s / 60 % 60,
                    s % 60,
                    esc(rest)
                )
            }
            Err(_) => esc(e),
        },
        None => esc(e),
    }
}

/// The `key=value` words of a status line.
pub fn words(line: &str) -> Vec<(&str, &str)> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// The value of `key` in a status line.
pub fn word<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    words(line)
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}
