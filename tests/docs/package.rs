//! The Debian package's parts agree with Pier (checked statically; `scripts/package` builds
//! the package itself): its commented config loads with `pier check`; each unit runs a
//! command `pier` has, with the hardening the install page promises, and lets Pier write
//! where the packaged config says it writes; and `Cargo.toml`'s `[package.metadata.deb]`
//! ships every file the units and the docs name.

use std::path::Path;
use std::process::Command;

use super::examples::{env_names, stand_in};
use super::{read, root};

const UNITS: [&str; 3] = ["pier.service", "pier-proxy.service", "pier-proxy@.service"];

/// The values of `key=` lines in a unit file, in order.
fn values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

fn unit(name: &str) -> String {
    read(&root().join("packaging/systemd").join(name))
}

#[test]
fn the_packaged_config_loads_with_pier_check() {
    let config = root().join("packaging/pier.toml");
    let mut check = Command::new(env!("CARGO_BIN_EXE_pier"));
    check
        .arg("--config")
        .arg(&config)
        .arg("check")
        .env_remove("PIER_CONFIG");
    for name in env_names(&read(&config)) {
        check.env(&name, stand_in(&name));
    }
    let out = check.output().expect("run pier check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn each_unit_runs_a_pier_command_hardened_and_may_write_where_pier_writes() {
    let config: toml::Value = toml::from_str(&read(&root().join("packaging/pier.toml"))).unwrap();
    let state_file = config["proxy"]["state_file"]
        .as_str()
        .expect("proxy.state_file");
    let state_dir = Path::new(state_file).parent().unwrap().to_str().unwrap();
    let help = Command::new(env!("CARGO_BIN_EXE_pier"))
        .arg("help")
        .output()
        .expect("pier help");
    let help = String::from_utf8_lossy(&help.stdout);
    for name in UNITS {
        let text = unit(name);
        for hardening in [
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
        ] {
            assert!(text.lines().any(|l| l == hardening), "{name}: {hardening}");
        }
        assert_eq!(values(&text, "ReadWritePaths"), [state_dir], "{name}");
        assert_eq!(values(&text, "User"), ["pier"], "{name}");
        assert_eq!(
            values(&text, "Environment"),
            ["PIER_CONFIG=/etc/pier/pier.toml"],
            "{name}"
        );
        for command in ["ExecStartPre", "ExecStart", "ExecReload"]
            .iter()
            .flat_map(|k| values(&text, k))
        {
            let sub = command
                .strip_prefix("/usr/bin/pier ")
                .unwrap_or_else(|| panic!("{name}: {command} is not /usr/bin/pier"));
            let sub = sub.split_whitespace().next().unwrap();
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
                "{name}: `pier {sub}` is not a command"
            );
        }
    }
    let serve = unit("pier.service");
    assert_eq!(values(&serve, "ExecStartPre"), ["/usr/bin/pier migrate"]);
    assert_eq!(values(&serve, "ExecStart"), ["/usr/bin/pier serve"]);
    assert_eq!(
        values(&serve, "ExecReload"),
        ["/usr/bin/pier reload --pid $MAINPID"]
    );
    for proxy in ["pier-proxy.service", "pier-proxy@.service"] {
        assert_eq!(values(&unit(proxy), "ExecStart"), ["/usr/bin/pier proxy"]);
    }
}

#[test]
fn the_package_metadata_ships_the_units_the_conffile_and_the_scripts() {
    let cargo: toml::Value = toml::from_str(&read(&root().join("Cargo.toml"))).unwrap();
    let deb = &cargo["package"]["metadata"]["deb"];
    assert_eq!(
        deb["conf-files"].as_array().unwrap(),
        &[toml::Value::from("/etc/pier/pier.toml")]
    );
    let sources: Vec<&str> = deb["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a[0].as_str().unwrap())
        .collect();
    for source in &sources {
        assert!(
            *source == "target/release/pier" || root().join(source).is_file(),
            "asset {source} does not exist"
        );
    }
    assert!(sources.contains(&"packaging/pier.toml"));
    assert!(sources.contains(&"packaging/systemd/pier-proxy@.service"));
    let units: Vec<&str> = deb["systemd-units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["unit-name"].as_str().unwrap())
        .collect();
    assert_eq!(units, ["pier", "pier-proxy"]);
    let scripts = root().join(deb["maintainer-scripts"].as_str().unwrap());
    let postinst = read(&scripts.join("postinst"));
    for needed in [
        "#DEBHELPER#",
        "adduser --system",
        "pier docker",
        "/var/lib/pier",
    ] {
        assert!(postinst.contains(needed), "postinst: {needed}");
    }
    assert!(read(&scripts.join("postrm")).contains("#DEBHELPER#"));
}
