//! Every `pier` command the docs and the README show exists, with every option they give
//! it: the commands are read from code blocks and inline code, and compared with what
//! `pier help` and `pier COMMAND --help` print.

use std::collections::BTreeMap;
use std::process::Command;

use super::{markdown_files, read, shown};

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pier"))
        .args(args)
        .env_remove("PIER_CONFIG")
        .output()
        .expect("run pier help");
    assert!(
        out.status.success(),
        "pier {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a help text lists under `Commands:`.
fn commands_in(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A `pier …` command line as the docs write it: from a code block's line (after an
/// optional `$ `), or from inline code.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let l = line.trim_start().trim_start_matches("$ ");
            if l.starts_with("pier ") {
                lines.push(l.split(" #").next().unwrap_or(l).to_owned());
            }
            continue;
        }
        for (i, code) in line.split('`').enumerate() {
            if i % 2 == 1 && code.starts_with("pier ") {
                lines.push(code.to_owned());
            }
        }
    }
    lines
}

/// The words of a command line with the global options (`--config FILE`, `[--config …]`)
/// and placeholders left out: what names a subcommand, and the options given.
fn parse(line: &str) -> (Vec<String>, Vec<String>) {
    let mut words = Vec::new();
    let mut options = Vec::new();
    let mut it = line.split_whitespace().skip(1).peekable();
    while let Some(w) = it.next() {
        let w = w.trim_matches(|c| c == '[' || c == ']' || c == ',' || c == ';' || c == ')');
        if w.is_empty() || w == "…" || w == "..." || w == "|" || w == "&&" {
            if w == "|" || w == "&&" {
                break;
            }
            continue;
        }
        if w == "--config" || w == "-c" {
            it.next();
            continue;
        }
        if w.starts_with('-') && w.len() > 1 {
            let name = w.split('=').next().unwrap_or(w);
            options.push(name.to_owned());
            continue;
        }
        if words.len() < 2 && w.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            words.push(w.to_owned());
        } else if words.is_empty() {
            break;
        }
    }
    (words, options)
}

#[test]
fn every_pier_command_in_the_docs_exists_with_its_options() {
    let top = help(&["help"]);
    let commands = commands_in(&top);
    assert!(
        commands.iter().any(|c| c == "serve"),
        "no commands read from `pier help`:\n{top}"
    );
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for file in markdown_files() {
        for line in command_lines(&read(&file)) {
            let (words, options) = parse(&line);
            let Some(cmd) = words.first() else {
                if !options.is_empty() {
                    let known = &top;
                    for o in options.iter().filter(|o| !known.contains(o.as_str())) {
                        wrong.push(format!("{}: `{line}`: no option {o}", shown(&file)));
                    }
                }
                continue;
            };
            seen += 1;
            if !commands.contains(cmd) {
                wrong.push(format!(
                    "{}: `{line}`: no command `pier {cmd}`",
                    shown(&file)
                ));
                continue;
            }
            let text = helps
                .entry(cmd.clone())
                .or_insert_with(|| help(&[cmd, "--help"]))
                .clone();
            let sub = commands_in(&text);
            let mut text = text;
            if let Some(s) = words.get(1).filter(|s| sub.contains(s)) {
                text = help(&[cmd, s, "--help"]);
            } else if let Some(s) = words.get(1).filter(|_| !sub.is_empty()) {
                wrong.push(format!(
                    "{}: `{line}`: no command `pier {cmd} {s}`",
                    shown(&file)
                ));
            }
            for o in &options {
                let listed = text
                    .split(|c: char| c.is_whitespace() || c == ',')
                    .any(|w| {
                        w == o || w.starts_with(&format!("{o}=")) || w.starts_with(&format!("{o}["))
                    });
                if !listed {
                    wrong.push(format!(
                        "{}: `{line}`: `pier {cmd}` has no option {o}",
                        shown(&file)
                    ));
                }
            }
        }
    }
    assert!(seen > 20, "only {seen} pier commands found in the docs");
    assert!(
        wrong.is_empty(),
        "the docs show commands pier does not have:\n{}",
        wrong.join("\n")
    );
}
