#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The README's five-minute tour, run as written on a fresh mount.
//!
//! The block fenced with the info string `sh tour` is a shell script a user
//! pastes after mounting on `/mnt/bt`. Each `# -> text` line below a command
//! is a line that command prints; the lines under one command are all it
//! prints. The test runs the whole block in one `bash -e` (state such as
//! `cd`, variables and open descriptors carries over, as when pasted), with a
//! marker printed before each command, and compares each command's output
//! with its expectations.

use std::path::Path;
use std::process::Command;
use tests::Mount;

/// Where the tour expects the mount.
const MOUNTPOINT: &str = "/mnt/bt";
/// Printed before each command so that the output can be cut per command.
const MARKER: &str = "@@tour-step@@";

/// One command of the tour and the lines it must print (none: unchecked).
#[derive(Debug)]
struct Step {
    command: String,
    expect: Vec<String>,
}

/// The body of the README's ```` ```sh tour ```` block.
fn tour_block(readme: &str) -> Option<String> {
    let mut lines = readme.lines();
    lines.by_ref().find(|l| l.trim_end() == "```sh tour")?;
    let body: Vec<&str> = lines.take_while(|l| l.trim_end() != "```").collect();
    Some(body.join("\n"))
}

/// The block's commands, each with the `# -> ` lines that follow it.
fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        let line = line.trim_end();
        if let Some(want) = line.strip_prefix("# -> ") {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("`{line}` comes before any command"));
            step.expect.push(want.to_string());
        } else if line.is_empty() || line.starts_with('#') {
            continue;
        } else {
            assert!(
                !line.ends_with('\\'),
                "the tour's commands are one line each: {line}"
            );
            steps.push(Step {
                command: line.to_string(),
                expect: Vec::new(),
            });
        }
    }
    steps
}

/// The script that runs every step after a marker line.
fn script(steps: &[Step], mnt: &Path) -> String {
    let mnt = mnt.to_str().unwrap();
    let mut s = String::new();
    for step in steps {
        // The marker starts on a line of its own even after output without
        // a final newline.
        s.push_str(&format!("printf '\\n%s\\n' '{MARKER}'\n"));
        s.push_str(&step.command.replace(MOUNTPOINT, mnt));
        s.push('\n');
    }
    s
}

/// Each step's output lines, from the script's stdout.
fn outputs(stdout: &str) -> Vec<Vec<String>> {
    let marker = format!("\n{MARKER}\n");
    let mut pieces = stdout.split(&marker);
    // Before the first marker: nothing but its leading newline.
    assert_eq!(pieces.next(), Some(""), "output before the first step");
    pieces
        .map(|p| {
            // The next marker's leading newline was cut off with it; a final
            // newline of the step's own output is left.
            let p = p.strip_suffix('\n').unwrap_or(p);
            if p.is_empty() {
                Vec::new()
            } else {
                p.split('\n').map(str::to_string).collect()
            }
        })
        .collect()
}

#[test]
fn readme_tour_block_parses() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let block = tour_block(&readme).expect("README.md has no ```sh tour block");
    let steps = steps(&block);
    assert!(
        steps.len() >= 15,
        "the tour has only {} commands:\n{block}",
        steps.len()
    );
    let checked = steps.iter().filter(|s| !s.expect.is_empty()).count();
    assert!(checked >= 8, "only {checked} commands have expected output");
    assert!(
        steps[0].command == format!("cd {MOUNTPOINT}"),
        "the tour starts in the mount: {}",
        steps[0].command
    );
    // What the tour must show.
    for what in [
        "mkdir ",
        ".schema",
        "echo ",
        "cat ",
        ".versions",
        ".mutate",
        ".scan/",
        ".at/",
        ".chubby/",
        "flock ",
        "rm -r ",
        ".bigtable/status",
    ] {
        assert!(
            steps.iter().any(|s| s.command.contains(what)),
            "the tour has no command with `{what}`"
        );
    }
}

#[test]
fn the_parser_cuts_output_per_step() {
    let block =
        "cd /mnt/bt\necho a\n# -> a\nprintf b\n# -> b\ntrue\necho c; echo d\n# -> c\n# -> d\n";
    let steps = steps(block);
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[3].expect, Vec::<String>::new());
    assert_eq!(steps[4].expect, vec!["c", "d"]);
    let s = script(&steps, Path::new("/tmp"));
    assert!(s.contains("cd /tmp\n") && !s.contains("/mnt/bt"), "{s}");
    let out = Command::new("bash").arg("-ec").arg(&s).output().unwrap();
    assert!(out.status.success());
    let got = outputs(&String::from_utf8(out.stdout).unwrap());
    let want: Vec<Vec<&str>> = vec![vec![], vec!["a"], vec!["b"], vec![], vec!["c", "d"]];
    assert_eq!(got, want);
}

#[test]
fn readme_tour_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let block = tour_block(&readme).expect("README.md has no ```sh tour block");
    let steps = steps(&block);
    let m = Mount::new();
    let out = Command::new("bash")
        .arg("-e")
        .arg("-c")
        .arg(script(&steps, &m.mnt))
        .current_dir("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let got = outputs(&stdout);
    assert!(
        out.status.success(),
        "the tour failed ({}) at `{}`:\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status,
        steps
            .get(got.len().saturating_sub(1))
            .map_or("?", |s| s.command.as_str()),
    );
    assert_eq!(got.len(), steps.len(), "stdout:\n{stdout}");
    for (step, lines) in steps.iter().zip(&got) {
        if step.expect.is_empty() {
            continue;
        }
        assert_eq!(
            lines, &step.expect,
            "`{}` printed other lines than its `# -> ` lines say\nstderr:\n{stderr}",
            step.command
        );
    }
    // The last command shows the status: it must have printed something.
    assert!(
        !got.last().unwrap().is_empty(),
        "`{}` printed nothing",
        steps.last().unwrap().command
    );
}
