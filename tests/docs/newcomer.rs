//! A newcomer's first steps, as the Getting started page gives them: its "Run the demo"
//! commands, run in order in a fresh copy of the repository, bring the demo up, show the
//! app, deploy a second version and take it all down.
//!
//! The copy is every file `git ls-files` names, as a clone would have them. The commands
//! run as written, with two changes a newcomer does not need: the demo runs the `pier`
//! this test was built with (`PIER_DEMO_BIN`, instead of a second `cargo build` of the
//! copy), and its ports and database are free ones of this test's own (each default port
//! in a command is replaced by the one the demo was given), so that a demo a developer
//! runs on this machine is not disturbed.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::{read, root};

/// The demo's ports, as the page writes them, and the variables that move them.
const PORTS: &[(u16, &str)] = &[
    (5000, "PIER_DEMO_REGISTRY_PORT"),
    (8080, "PIER_DEMO_PORT"),
    (8081, "PIER_DEMO_APP_PORT"),
    (8082, "PIER_DEMO_PROXY_PORT"),
    (8099, "PIER_DEMO_PROXY_ADMIN_PORT"),
];

/// The commands of the page's "Run the demo" block, in order.
fn demo_commands() -> Vec<String> {
    let page = read(&root().join("docs/src/getting-started.md"));
    let section = page
        .split("\n## Run the demo\n")
        .nth(1)
        .expect("getting-started.md has a `## Run the demo` section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a ```sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The private networks of the demo's apps (`pier-web`, `pier-web-bg`) that exist now.
fn demo_networks() -> BTreeSet<String> {
    let out = Command::new("docker")
        .args(["network", "ls", "--format", "{{.Name}}"])
        .output()
        .expect("run docker network ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| *n == "pier-web" || *n == "pier-web-bg")
        .map(str::to_owned)
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The repository's files, as a fresh clone has them, copied into `dir`.
fn fresh_copy(dir: &Path) {
    let status = Command::new("bash")
        .arg("-c")
        .arg(
            "git ls-files -z --cached --others --exclude-standard \
             | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C \"$1\"",
        )
        .arg("copy")
        .arg(dir)
        .current_dir(root())
        .status()
        .expect("run git ls-files | tar");
    assert!(status.success(), "copying the repository failed");
    assert!(
        dir.join("scripts/demo").exists(),
        "the copy has no scripts/demo"
    );
}

/// A database of the demo's own, made with the suite's superuser login.
fn create_database(name: &str) -> String {
    let url = std::env::var("PIER_TEST_DATABASE_URL")
        .expect("PIER_TEST_DATABASE_URL is unset: run the tests through scripts/test");
    let out = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-d",
            &url,
            "-c",
            &format!("CREATE DATABASE {name}"),
        ])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "CREATE DATABASE {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    url
}

fn drop_database(url: &str, name: &str) {
    let _ = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-d",
            url,
            "-c",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        ])
        .output();
}

#[test]
fn the_getting_started_commands_bring_up_the_demo_on_a_fresh_copy() {
    let commands = demo_commands();
    assert!(
        commands
            .first()
            .is_some_and(|c| c.starts_with("scripts/demo"))
            && commands.last().is_some_and(|c| c.contains("down")),
        "the block should bring the demo up first and take it down last: {commands:?}"
    );
    let networks_before = demo_networks();
    let copy = tempfile::tempdir().expect("a temporary folder");
    fresh_copy(copy.path());
    let database = format!("pier_newcomer_{}", std::process::id());
    let admin_url = create_database(&database);
    let ports: Vec<(u16, u16, &str)> = PORTS
        .iter()
        .map(|(default, var)| (*default, free_port(), *var))
        .collect();
    let started = Instant::now();
    let mut failure = None;
    let mut shown = Vec::new();
    for command in &commands {
        let mut line = command.clone();
        for (default, port, _) in &ports {
            line = line.replace(
                &format!("127.0.0.1:{default}"),
                &format!("127.0.0.1:{port}"),
            );
        }
        let mut run = Command::new("bash");
        run.arg("-c")
            .arg(&line)
            .current_dir(copy.path())
            .env("PIER_DEMO_BIN", env!("CARGO_BIN_EXE_pier"))
            .env("PIER_DEMO_DATABASE", &database)
            .env_remove("CARGO_TARGET_DIR");
        for (_, port, var) in &ports {
            run.env(var, port.to_string());
        }
        let out = run.output().expect("run a command of the page");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        shown.push((line.clone(), stdout.clone()));
        if !out.status.success() {
            failure = Some(format!(
                "`{line}` failed ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
            break;
        }
    }
    if failure.is_some() {
        // Whatever the page's own `down` did not get to.
        let _ = Command::new("bash")
            .args(["-c", "scripts/demo down --purge"])
            .current_dir(copy.path())
            .envs(ports.iter().map(|(_, p, v)| (*v, p.to_string())))
            .output();
    }
    drop_database(&admin_url, &database);
    // The apps' private networks, which `down` leaves (as Pier does), unless they were
    // there before this test.
    for n in demo_networks().difference(&networks_before) {
        let _ = Command::new("docker").args(["network", "rm", n]).output();
    }
    if let Some(f) = failure {
        panic!("{f}");
    }
    eprintln!(
        "the Getting started commands ran in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let answers: Vec<&str> = shown
        .iter()
        .filter(|(l, _)| l.starts_with("curl"))
        .map(|(_, out)| out.as_str())
        .collect();
    assert_eq!(answers.len(), 2, "the page shows the app twice: {shown:?}");
    assert!(
        answers[0].contains("v1"),
        "the first answer is v1: {}",
        answers[0]
    );
    assert!(
        answers[1].contains("v2"),
        "after the push, v2: {}",
        answers[1]
    );
    // `down --purge` leaves none of the demo's images behind (a whole run used to leave
    // two per run of this page).
    let registry = ports[0].1;
    let left = docker_images(&format!("127.0.0.1:{registry}/demo/web"));
    assert_eq!(left.trim(), "", "images of the demo's registry left behind");
}

/// `docker images -q <repository>`: the ids, one a line.
fn docker_images(repository: &str) -> String {
    let out = Command::new("docker")
        .args(["images", "-q", repository])
        .output()
        .expect("run docker images");
    assert!(out.status.success(), "docker images: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
