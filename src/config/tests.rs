//! The config read as users write it: every section, every refusal, the example file.

use super::*;

const MINIMAL: &str = r#"
    [server]
    database_url = "postgres://localhost/pier"
    allow_short_secrets = true
    [[sources]]
    name = "local"
    kind = "distribution"
    token = "env:PIER_TEST_CONFIG_TOKEN"
    [[apps]]
    name = "web"
    image = "127.0.0.1:5000/demo/web"
    port = 8080
    publish = "127.0.0.1:8081"
    health = { path = "/health" }
    memory = "256m"
"#;

#[test]
fn secrets_come_from_the_environment_and_never_print() {
    // SAFETY: only this test reads this variable.
    unsafe { std::env::set_var("PIER_TEST_CONFIG_TOKEN", "s3cret") };
    let c = Config::parse(MINIMAL, Path::new(".")).unwrap();
    assert_eq!(c.sources[0].tokens[0].expose(), "s3cret");
    assert!(!format!("{c:?}").contains("s3cret"));
    assert_eq!(c.apps[0].memory_bytes, Some(256 << 20));
    assert_eq!(c.apps[0].tag, "latest");
    assert_eq!(c.apps[0].registry_host(), "127.0.0.1:5000");
    assert_eq!(c.apps[0].repository(), "demo/web");
    assert_eq!(c.apps[0].health.as_ref().unwrap().timeout.as_secs(), 60);
}

#[test]
fn database_urls_are_kept_in_order_and_exactly_one_of_the_two_fields_is_required() {
    let base = MINIMAL.replace("token = \"env:PIER_TEST_CONFIG_TOKEN\"", "token = \"t\"");
    let list = base.replace(
        "database_url = \"postgres://localhost/pier\"",
        "database_urls = [\"postgres://db1/pier\", \"postgres://db2,db3/pier\"]",
    );
    let c = Config::parse(&list, Path::new(".")).unwrap();
    assert_eq!(
        c.server.database_urls(),
        ["postgres://db1/pier", "postgres://db2,db3/pier"]
    );
    let both = base.replace(
        "database_url = \"postgres://localhost/pier\"",
        "database_url = \"postgres://db1/pier\"\ndatabase_urls = [\"postgres://db2/pier\"]",
    );
    let e = Config::parse(&both, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
    let neither = base.replace("database_url = \"postgres://localhost/pier\"", "");
    let e = Config::parse(&neither, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is required"), "{e}");
}

#[test]
fn a_docker_hub_image_is_read_as_docker_pull_reads_it() {
    let hub = MINIMAL
        .replace("127.0.0.1:5000/demo/web", "acme/web")
        .replace("token = \"env:PIER_TEST_CONFIG_TOKEN\"", "token = \"t\"");
    let c = Config::parse(&hub, Path::new(".")).unwrap();
    assert_eq!(c.apps[0].registry_host(), "docker.io");
    assert_eq!(c.apps[0].repository(), "acme/web");
    let official = hub.replace("\"acme/web\"", "\"nginx\"");
    let c = Config::parse(&official, Path::new(".")).unwrap();
    assert_eq!(c.apps[0].repository(), "library/nginx");
    let tagged = hub.replace("\"acme/web\"", "\"acme/web:v1\"");
    let e = Config::parse(&tagged, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("app `web`") && e.contains("without tag"), "{e}");
    let bad = hub.replace("\"acme/web\"", "\"Acme/Web\"");
    let e = Config::parse(&bad, Path::new(".")).unwrap_err().to_string();
    assert!(e.contains("not an image reference"), "{e}");
}

#[test]
fn a_missing_secret_names_the_variable_not_a_value() {
    let text = MINIMAL.replace("PIER_TEST_CONFIG_TOKEN", "PIER_TEST_CONFIG_UNSET");
    let err = Config::parse(&text, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("PIER_TEST_CONFIG_UNSET"), "{err}");
}

#[test]
fn a_source_without_credentials_is_refused() {
    let text = MINIMAL.replace("token = \"env:PIER_TEST_CONFIG_TOKEN\"", "");
    let err = Config::parse(&text, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("never accepts unauthenticated"), "{err}");
}

#[test]
fn an_image_with_a_tag_is_refused() {
    // SAFETY: only this module's tests set this variable, to the same value.
    unsafe { std::env::set_var("PIER_TEST_CONFIG_TOKEN", "s3cret") };
    let text = MINIMAL.replace("demo/web\"", "demo/web:v1\"");
    let err = Config::parse(&text, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("without tag"), "{err}");
}

#[test]
fn a_registry_entry_overrides_the_servers_registry_limits_field_by_field() {
    // SAFETY: only this module's tests set this variable, to the same value.
    unsafe { std::env::set_var("PIER_TEST_CONFIG_TOKEN", "s3cret") };
    let text = MINIMAL.replace(
        "[[sources]]",
        "registry_timeout = \"7s\"\nmax_manifest = \"1m\"\nretry_budget = \"9s\"\n\
         [[registries]]\nhost = \"127.0.0.1:5000\"\ninsecure = true\n\
         first_byte_timeout = \"2s\"\nmax_manifest = \"64k\"\n[[sources]]",
    );
    let c = Config::parse(&text, Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let server = c.server.registry_limits;
    assert_eq!(server.timeout, Duration::from_secs(7));
    assert_eq!(server.max_manifest_bytes, 1 << 20);
    assert_eq!(server.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.server.retry_budget, Duration::from_secs(9));
    let own = c.registries[0].limits;
    assert_eq!(own.first_byte_timeout, Duration::from_secs(2));
    assert_eq!(own.max_manifest_bytes, 64 << 10);
    assert_eq!(
        own.timeout,
        Duration::from_secs(7),
        "inherited from [server]"
    );

    let too_big = text.replace("max_manifest = \"64k\"", "max_manifest = \"1g\"");
    let err = Config::parse(&too_big, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("registries[127.0.0.1:5000]: max_manifest"),
        "{err}"
    );
    let zero = text.replace("first_byte_timeout = \"2s\"", "first_byte_timeout = \"0s\"");
    assert!(Config::parse(&zero, Path::new(".")).is_err());
}

#[test]
fn tag_rules_and_poll_settings_parse_and_conflicts_are_refused() {
    // SAFETY: only this module's tests set this variable, to the same value.
    unsafe { std::env::set_var("PIER_TEST_CONFIG_TOKEN", "s3cret") };
    let with = |lines: &str| MINIMAL.replace("port = 8080", &format!("port = 8080\n{lines}"));
    let c = Config::parse(&with("versions = \">=1.2, <2\""), Path::new(".")).unwrap();
    assert_eq!(c.apps[0].rule.to_string(), "semver >=1.2, <2");
    // A source without `registry` covers every host: polling is off by default.
    assert_eq!(c.apps[0].poll, None);
    let c = Config::parse(&with("tag = \"v1.*\"\npoll = \"30s\""), Path::new(".")).unwrap();
    assert_eq!(c.apps[0].rule.kind(), "glob");
    assert_eq!(c.apps[0].poll, Some(Duration::from_secs(30)));
    let err = Config::parse(&with("tag = \"v1\"\nversions = \"^1\""), Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not both"), "{err}");
    let err = Config::parse(&with("poll = \"100ms\""), Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 1s"), "{err}");
    assert!(Config::parse(&with("poll = \"sometimes\""), Path::new(".")).is_err());
    // An app no source can report is polled by default.
    let no_sources = MINIMAL
        .replace("[[sources]]", "")
        .replace("name = \"local\"", "")
        .replace("kind = \"distribution\"", "")
        .replace("token = \"env:PIER_TEST_CONFIG_TOKEN\"", "");
    let c = Config::parse(&no_sources, Path::new(".")).unwrap();
    assert_eq!(c.apps[0].poll, Some(DEFAULT_POLL));
}

/// The documented example must stay loadable as the code changes.
mod example {
    use super::*;

    // Long by design: one assertion per documented feature of examples/pier.toml, so that
    // the example and this list are read side by side.
    /// The documented example must stay loadable as the code changes.
    #[test]
    fn the_example_config_loads() {
        for name in [
            "PIER_DATABASE_URL",
            "PIER_ADMIN_TOKEN",
            "PIER_REGISTRY_PASSWORD",
            "PIER_HOOK_TOKEN",
            "PIER_CI_HMAC",
            "PIER_GITHUB_SECRET",
            "PIER_GITEA_SECRET",
            "PIER_HARBOR_TOKEN",
            "PIER_ZOT_TOKEN",
            "PIER_ARTIFACTORY_SECRET",
            "PIER_NEXUS_SECRET",
            "PIER_ACR_TOKEN",
            "WEB_SESSION_KEY",
            "BILLING_DB_PASSWORD",
            "PIER_NTFY_TOKEN",
            "PIER_MATRIX_TOKEN",
            "PIER_SMTP_PASSWORD",
        ] {
            // SAFETY: these names are only read by config tests.
            unsafe { std::env::set_var(name, "an-example-secret-of-32-bytes-or-more") };
        }
        // SAFETY: as above.
        unsafe {
            std::env::set_var("PIER_DOCKERHUB_TOKEN", "0123456789abcdef-example-url-token");
            std::env::set_var("PIER_QUAY_TOKEN", "0123456789abcdef-example-url-token");
            std::env::set_var(
                "PIER_STANDARD_WEBHOOKS_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            );
            std::env::set_var(
                "PIER_NOTIFY_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            );
            std::env::set_var(
                "PIER_SLACK_WEBHOOK_URL",
                "https://hooks.slack.com/services/T/B/X",
            );
            std::env::set_var(
                "PIER_DISCORD_WEBHOOK_URL",
                "https://discord.com/api/webhooks/1/x",
            );
            std::env::set_var(
                "PIER_TEAMS_WORKFLOW_URL",
                "https://prod.westeurope.logic.azure.com/workflows/x",
            );
            std::env::set_var("PIER_TELEGRAM_BOT_TOKEN", "123456:ABC-example_token");
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pier.toml");
        let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!c.apps.is_empty() && !c.sources.is_empty());
        // The registry limits are documented, and an entry's own override the server's.
        assert_eq!(c.server.registry_limits, RegistryLimits::default());
        assert_eq!(c.server.retry_budget, Duration::from_secs(120));
        assert!(
            c.registries
                .iter()
                .all(|r| r.limits == RegistryLimits::default())
        );
        // Every tag rule and poll setting is documented by an app that uses it.
        let kinds: Vec<&str> = c.apps.iter().map(|a| a.rule.kind()).collect();
        for kind in ["tag", "glob", "semver"] {
            assert!(
                kinds.contains(&kind),
                "examples/pier.toml has no {kind} app"
            );
        }
        assert!(c.apps.iter().any(|a| a.poll_explicit && a.poll.is_none()));
        assert!(c.apps.iter().any(|a| a.poll.is_some()));
        // Signed images: a [[trust]] entry with a file key and an inline one, covering apps.
        assert_eq!(c.trust.len(), 1);
        assert_eq!(c.trust[0].rule.keys.len(), 2);
        let signed: Vec<&str> = c
            .apps
            .iter()
            .filter(|a| a.signature.is_some())
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(signed, ["api", "shop"]);
        // Every notification format is documented, and a digest.
        for f in <super::NotifyFormat as strum::VariantArray>::VARIANTS {
            assert!(
                c.notifications.iter().any(|n| n.format() == *f),
                "examples/pier.toml has no {f} notification"
            );
        }
        assert!(c.notifications.iter().any(|n| n.digest.is_some()));
        // Every kind is documented with a source that loads.
        for kind in [
            "distribution",
            "generic",
            "github",
            "gitea",
            "harbor",
            "zot",
            "dockerhub",
            "quay",
            "artifactory",
            "nexus",
            "acr",
        ] {
            assert!(
                c.sources.iter().any(|s| s.kind.as_str() == kind),
                "examples/pier.toml has no {kind} source"
            );
        }
    }
}
