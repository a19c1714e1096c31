//! The JSON API answers as its OpenAPI document (`/api/openapi.json`) says, for
//! whatever schemathesis sends it: no 5xx, no undocumented status or content type, no
//! answer that violates its schema. Against a real Pier with a deployed app, so that apps,
//! deployments, deliveries and notifications have rows to show.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_schema_violation_in_the_api() {
    // scripts/test installs schemathesis and says where it is.
    let st = std::env::var("PIER_TEST_SCHEMATHESIS").unwrap_or_else(|_| "st".into());
    let found = Command::new(&st).arg("--version").output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "schemathesis is not installed: run scripts/test, or `pip install schemathesis`"
    );
    let receiver = HookRecorder::start().await;
    let env = TestEnv::builder()
        .sources_toml(&format!(
            "[[notifications]]\nname = \"hooks\"\nurl = \"{}\"\nformat = \"slack\"\n",
            receiver.url("/slack")
        ))
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env
        .latest_final_of(env.app(), &[], Duration::from_secs(60))
        .await;
    assert_eq!(d["state"], "succeeded");

    let (code, doc) = env.api_get("/openapi.json").await;
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let schema = env.pier_url("/api/openapi.json");
    let base = env.pier_url("/");
    let auth = format!("Authorization: Bearer {}", env.admin_token);
    // Run where it can leave its caches (crashes it found are replayed from `.schemathesis/`
    // of the working directory): a run must not depend on an earlier one.
    let scratch = tempfile::tempdir().expect("tempdir");
    let cwd = scratch.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&st)
            .current_dir(&cwd)
            .args(["run", &schema, "--url", &base, "-H", &auth])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,\
                 response_schema_conformance",
                "--max-examples",
                "40",
                "--request-timeout",
                "35",
                "--generation-deterministic",
                "--no-color",
            ])
            .output()
            .expect("run schemathesis")
    })
    .await
    .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}"
    );
    assert!(
        report.contains("Tested: 17"),
        "every operation (17, with GET /api/whoami and the logs) was tested: {report}"
    );
    env.cleanup().await;
}
