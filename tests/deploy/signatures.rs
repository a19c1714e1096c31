//! Only signed images run. A real registry holds the signatures, in both places
//! cosign writes them (the legacy `sha256-<hex>.sig` tag and cosign 3's bundles as OCI
//! referrers), made here by a signing library that is not Pier's code, or by real cosign
//! (its published test vectors, when at hand); a real Pier checks them in its `signature`
//! step before anything is pulled.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

/// `[[trust]] ci` covering the test registry's `demo/*`, trusting `keys` (the first inline,
/// the others as files in `dir`), with `extra` lines.
fn trust_toml(keys: &[String], dir: &std::path::Path, extra: &str) -> String {
    let mut specs = Vec::new();
    for (i, pem) in keys.iter().enumerate() {
        if i == 0 {
            specs.push(format!("'''{pem}'''"));
        } else {
            let path = dir.join(format!("key{i}.pub"));
            std::fs::write(&path, pem).expect("write key file");
            specs.push(format!("\"file:{}\"", path.display()));
        }
    }
    format!(
        "[[trust]]\nname = \"ci\"\nrepositories = [\"{{registry}}/demo/*\"]\nkeys = [{}]\n\
         wait = \"1s\"\n{extra}\n",
        specs.join(", ")
    )
}

struct Signed {
    env: TestEnv,
    _keys: tempfile::TempDir,
}

async fn env_trusting(keys: &[String], extra: &str, builder: TestEnvBuilder) -> Signed {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = builder
        .sources_toml(&trust_toml(keys, dir.path(), extra))
        .start()
        .await;
    Signed { env, _keys: dir }
}

fn steps_of(d: &Value) -> Vec<&str> {
    d["steps"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["step"].as_str()).collect())
        .unwrap_or_default()
}

fn step<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == name))
        .unwrap_or_else(|| panic!("no {name} step: {d:#}"))
}

/// The digest `image` will have once pushed (the harness builds images deterministically).
fn digest_of(image: &TestImage) -> String {
    image.build("amd64").digest
}

async fn legacy_sign(env: &TestEnv, key: &Signer, digest: &str) {
    let payload = simple_payload(&env.image(), digest, "null");
    push_sig_tag(
        &env.registry_host(),
        env.repo(),
        digest,
        &[signed_layer(key, payload)],
    )
    .await;
}

/// A failed deployment changed nothing: no pull, no container, no image in the engine.
async fn nothing_happened(env: &TestEnv, d: &Value, digest: &str) {
    assert_eq!(d["state"], "failed", "{d:#}");
    let names = steps_of(d);
    assert!(
        names.starts_with(&["resolve", "signature"]),
        "{names:?}: {d:#}"
    );
    for later in ["pull", "verify", "create", "start"] {
        assert!(!names.contains(&later), "{later} ran: {names:?}");
    }
    assert!(env.engine.containers_of_app(env.app()).await.is_empty());
    let reference = format!("{}@{digest}", env.image());
    assert!(
        env.engine.repo_digests(&reference).await.is_empty(),
        "{reference} was pulled"
    );
}

#[tokio::test]
async fn an_image_signed_in_either_format_deploys_and_the_page_names_the_key() {
    let legacy_key = Signer::p256();
    let bundle_key = Signer::ed25519();
    let s = env_trusting(
        &[legacy_key.pem(), bundle_key.pem()],
        "",
        TestEnv::builder(),
    )
    .await;
    let env = &s.env;
    let app = env.app().to_owned();

    let v1 = TestImage::healthy("v1");
    let d1 = digest_of(&v1);
    legacy_sign(env, &legacy_key, &d1).await;
    env.push(&v1, "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let id1 = first["id"].as_str().unwrap().to_owned();
    let first = env.deployment_final(&id1, DEPLOY).await;
    let names = steps_of(&first);
    assert_eq!(&names[..3], ["resolve", "signature", "pull"], "{first:#}");
    let sig = &step(&first, "signature")["result"];
    assert_eq!(sig["key"], legacy_key.fingerprint().as_str(), "{sig:#}");
    assert_eq!(sig["format"], "sig_tag");
    assert_eq!(sig["signed"], d1.as_str());

    // Cosign 3: a bundle referrer, found through the referrers fallback tag.
    let v2 = TestImage::healthy("v2");
    let built = v2.build("amd64");
    push_bundle(
        &env.registry_host(),
        env.repo(),
        &built.digest,
        MT_OCI_MANIFEST,
        built.manifest.len(),
        &bundle(&bundle_key, &statement(&built.digest)),
    )
    .await;
    env.push(&v2, "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let second = env.latest_final_of(&app, &[&id1], DEPLOY).await;
    assert_eq!(second["state"], "succeeded", "{second:#}");

    // What runs, and who signed it: the API and the page.
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(view["generation"]["digest"], built.digest.as_str());
    assert_eq!(view["signature"]["key"], bundle_key.fingerprint().as_str());
    assert_eq!(view["signature"]["format"], "bundle");
    let page = http_get(&env.pier_url(&format!("/apps/{app}")))
        .await
        .expect("the app page answers")
        .1;
    assert!(
        page.contains(&format!("Signed by {}", bundle_key.fingerprint())),
        "{page}"
    );

    // An unsigned v3 fails at `signature`; v2 keeps serving, untouched.
    let id2 = second["id"].as_str().unwrap().to_owned();
    env.push(&TestImage::healthy("v3"), "main").await;
    let third = env.latest_final_of(&app, &[&id1, &id2], DEPLOY).await;
    assert_eq!(third["state"], "failed", "{third:#}");
    assert!(
        third["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("signature: ")),
        "{third:#}"
    );
    env.wait_app_version("v2", Duration::from_secs(5)).await;
    assert_eq!(
        env.running_digests_of(&app).await,
        vec![built.digest.clone()]
    );
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    s.env.cleanup().await;
}

#[tokio::test]
async fn an_unsigned_image_fails_at_signature_with_nothing_pulled_and_nothing_created() {
    let mut receiver = HookRecorder::start().await;
    let key = Signer::p256();
    let builder = TestEnv::builder().sources_toml(&format!(
        "[[notifications]]\nname = \"chat\"\nurl = \"{}\"\nformat = \"slack\"\n",
        receiver.url("/slack")
    ));
    let s = env_trusting(&[key.pem()], "", builder).await;
    let env = &s.env;
    let app = env.app().to_owned();

    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    let d = env
        .deployment_final(d["id"].as_str().unwrap(), DEPLOY)
        .await;
    nothing_happened(env, &d, &digest).await;
    let error = d["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("signature: no valid signature for"),
        "{error}"
    );
    assert!(error.contains("found: no signature"), "{error}");
    assert!(
        error.contains(&format!("keys tried: {} (trust ci)", key.fingerprint())),
        "{error}"
    );

    // Quarantined: the same digest pushed again is skipped, not retried.
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let quarantined: Vec<&str> = view["quarantine"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|q| q["digest"].as_str())
        .collect();
    assert_eq!(quarantined, [digest.as_str()], "{view:#}");
    // And said: the failure's notification names the reason.
    let hooks = receiver
        .collect_until(DEPLOY, |all| {
            all.iter()
                .any(|h| String::from_utf8_lossy(&h.body).contains("failed"))
        })
        .await;
    let text = String::from_utf8_lossy(&hooks.last().unwrap().body).into_owned();
    assert!(text.contains("no valid signature"), "{text}");
    s.env.cleanup().await;
}

#[tokio::test]
async fn an_image_signed_by_another_key_fails_and_names_that_key() {
    let trusted = Signer::p256();
    let other = Signer::p256();
    let s = env_trusting(&[trusted.pem()], "", TestEnv::builder()).await;
    let env = &s.env;
    let image = TestImage::healthy("v1");
    let built = image.build("amd64");
    // Both formats, signed by a key nobody trusts: a bundle names it by its hint, a legacy
    // ECDSA signature by the key recovered from it.
    legacy_sign(env, &other, &built.digest).await;
    push_bundle(
        &env.registry_host(),
        env.repo(),
        &built.digest,
        MT_OCI_MANIFEST,
        built.manifest.len(),
        &bundle(&other, &statement(&built.digest)),
    )
    .await;
    env.push(&image, "main").await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    let d = env
        .deployment_final(d["id"].as_str().unwrap(), DEPLOY)
        .await;
    nothing_happened(env, &d, &built.digest).await;
    let error = d["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "signed by an untrusted key {}",
            other.fingerprint()
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!(
            "recovered from the ECDSA signature, {}",
            other.fingerprint()
        )) || error.contains(&format!(" or {}", other.fingerprint())),
        "the legacy signature's key is named too: {error}"
    );
    s.env.cleanup().await;
}

#[tokio::test]
async fn a_signature_over_another_digest_or_a_changed_payload_fails() {
    let key = Signer::p256();
    let s = env_trusting(&[key.pem()], "", TestEnv::builder()).await;
    let env = &s.env;
    let app = env.app().to_owned();
    // v1 was signed; its signature is copied to v2's tag (a re-tagged image).
    let d1 = digest_of(&TestImage::healthy("v1"));
    let v2 = TestImage::healthy("v2");
    let d2 = digest_of(&v2);
    let signed_v1 = signed_layer(&key, simple_payload(&env.image(), &d1, "null"));
    push_sig_tag(
        &env.registry_host(),
        env.repo(),
        &d2,
        std::slice::from_ref(&signed_v1),
    )
    .await;
    env.push(&v2, "main").await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    let first = env
        .deployment_final(first["id"].as_str().unwrap(), DEPLOY)
        .await;
    nothing_happened(env, &first, &d2).await;
    let error = first["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "signature for another digest ({d1}) by {}",
            key.fingerprint()
        )),
        "{error}"
    );

    // v3: v1's signature with the payload edited to name v3: the signature no longer fits.
    let v3 = TestImage::healthy("v3");
    let d3 = digest_of(&v3);
    let (payload, annotations) = signed_v1;
    let forged = String::from_utf8(payload).unwrap().replace(&d1, &d3);
    push_sig_tag(
        &env.registry_host(),
        env.repo(),
        &d3,
        &[(forged.into_bytes(), annotations)],
    )
    .await;
    env.push(&v3, "main").await;
    let id1 = first["id"].as_str().unwrap();
    let second = env.latest_final_of(&app, &[id1], DEPLOY).await;
    let second = env
        .deployment_final(second["id"].as_str().unwrap(), DEPLOY)
        .await;
    nothing_happened(env, &second, &d3).await;
    let error = second["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("a signature no trusted key verifies"),
        "{error}"
    );
    s.env.cleanup().await;
}

#[tokio::test]
async fn a_signed_index_deploys_the_engines_platform() {
    let key = Signer::p256();
    let s = env_trusting(&[key.pem()], "", TestEnv::builder()).await;
    let env = &s.env;
    // The index is pushed first under another tag, to learn its digest and size; it is
    // signed (as `cosign sign` signs what a tag names: the index), then tagged `main`.
    let (index, amd64) = env.registry().push_index(env.repo(), "build", "v1").await;
    let size = index_size(env, &index).await;
    push_bundle(
        &env.registry_host(),
        env.repo(),
        &index,
        MT_OCI_INDEX,
        size,
        &bundle(&key, &statement(&index)),
    )
    .await;
    env.registry().push_index(env.repo(), "main", "v1").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    let d = env
        .deployment_final(d["id"].as_str().unwrap(), DEPLOY)
        .await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], amd64.as_str());
    let sig = step(&d, "signature");
    assert_eq!(sig["intent"]["manifest"], amd64.as_str(), "{sig:#}");
    assert_eq!(sig["result"]["signed"], index.as_str(), "{sig:#}");
    assert_eq!(env.running_digests_of(env.app()).await, vec![amd64]);
    s.env.cleanup().await;
}

async fn index_size(env: &TestEnv, digest: &str) -> usize {
    let url = format!(
        "{}/v2/{}/manifests/{digest}",
        env.registry().url(),
        env.repo()
    );
    let resp = http_client()
        .get(&url)
        .header("Accept", MANIFEST_ACCEPT)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("GET the index");
    resp.bytes().await.expect("the index's bytes").len()
}

/// Real cosign's output (containers/image's fixtures, made with cosign 1.x; sigstore/cosign's
/// own DSSE bundle), pushed to the registry as cosign stored it: Pier's verifier accepts
/// their signatures with the keys that made them, and then refuses them for what they
/// signed (other digests, an attestation), or names the key that made them.
#[tokio::test]
async fn real_cosign_signatures_are_verified_and_judged_by_what_they_sign() {
    let dir = cosign_vectors();
    let read = |p: &str| std::fs::read_to_string(dir.join(p)).expect("a vector file");
    let cosign_pub = read("containers-image/cosign.pub");
    let leaf_pub = read("cosign/leaf.pub");
    let s = env_trusting(&[cosign_pub, leaf_pub], "", TestEnv::builder()).await;
    let env = &s.env;
    let image = TestImage::healthy("v1");
    let built = image.build("amd64");
    let layers = [
        vector_layer(&dir.join("containers-image/dir-img-cosign-valid/signature-1")),
        vector_layer(&dir.join("containers-image/dir-img-cosign-key-rekor-valid/signature-1")),
    ];
    push_sig_tag(&env.registry_host(), env.repo(), &built.digest, &layers).await;
    let attestation =
        std::fs::read(dir.join("cosign/oci-attestation.sigstore.json")).expect("the bundle");
    push_bundle(
        &env.registry_host(),
        env.repo(),
        &built.digest,
        MT_OCI_MANIFEST,
        built.manifest.len(),
        &attestation,
    )
    .await;
    env.push(&image, "main").await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    let d = env
        .deployment_final(d["id"].as_str().unwrap(), DEPLOY)
        .await;
    nothing_happened(env, &d, &built.digest).await;
    let error = d["error"].as_str().unwrap_or_default();
    eprintln!("real cosign vectors: {error}");
    let fingerprint = |p: &str| {
        let key = pier::signature::PublicKey::from_pem(&read(p)).expect("a public key");
        key.fingerprint().to_string()
    };
    // The trusted cosign.pub verifies cosign's signature, which is for its own image.
    assert!(
        error.contains(&format!(
            "signature for another digest (sha256:634a8f35b5f16dcf4aaa0822adc0b1964bb786fca12f6831de8ddc45e5986a00) by {}",
            fingerprint("containers-image/cosign.pub")
        )),
        "{error}"
    );
    // The Rekor entry names the key that signed the second one: cosign2.pub, untrusted.
    assert!(
        error.contains(&format!(
            "signed by an untrusted key {}",
            fingerprint("containers-image/cosign2.pub")
        )),
        "{error}"
    );
    // Cosign's DSSE signature verifies with its certificate's key: an attestation.
    assert!(error.contains("an attestation (predicate type"), "{error}");
    s.env.cleanup().await;
}

/// SIGKILL at the step's boundary, before its registry reads and after its result is
/// journaled; a fresh Pier finishes the deployment once, with the signature checked once.
async fn dies_at(point: &str, var: &str) {
    let key = Signer::p256();
    let s = env_trusting(&[key.pem()], "", TestEnv::builder().lease("3s")).await;
    let mut env = s.env;
    let app = env.app().to_owned();
    env.pier_mut().restart_with(|c| c.env(var, point)).await;
    let image = TestImage::healthy("v1");
    let digest = digest_of(&image);
    legacy_sign(&env, &key, &digest).await;
    env.push(&image, "main").await;
    if var == "PIER_PAUSE_AT" {
        env.pier()
            .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
            .await;
        env.pier_mut().kill();
    } else {
        env.pier_mut().wait_dead("pier aborts", DEPLOY).await;
    }
    let crashed = env.deployment_rows(&app).await.pop().expect("a deployment");
    assert_eq!(crashed.state, "running", "{crashed:?}");
    env.pier_mut().restart_with(|c| c.without_env(var)).await;
    let d = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    let sig = step(&d, "signature");
    assert_eq!(sig["state"], "succeeded");
    assert_eq!(sig["result"]["key"], key.fingerprint().as_str());
    let replays = if point.ends_with(":before") { 1 } else { 0 };
    assert_eq!(sig["replays"], replays, "{sig:#}");
    assert_eq!(
        steps_of(&d).iter().filter(|s| **s == "signature").count(),
        1
    );
    env.cleanup().await;
}

#[tokio::test]
async fn sigkill_before_signature_resumes_and_deploys() {
    dies_at("signature:before", "PIER_PAUSE_AT").await;
}

#[tokio::test]
async fn abort_after_signature_resumes_and_deploys() {
    dies_at("signature:after", "PIER_CRASH_AT").await;
}

/// A registry that answers the signature tags with a huge or a trickled manifest: the step
/// fails within the registry's limits, as a manifest does, with nothing pulled.
#[tokio::test]
async fn a_huge_or_trickled_signature_manifest_fails_within_the_registry_limits() {
    let huge = HostileRegistry::start_for(
        Fault::HugeStreamed { bytes: 100 << 20 },
        "/manifests/sha256-",
    )
    .await;
    let slow = HostileRegistry::start_for(
        Fault::Trickle {
            every: Duration::from_millis(500),
        },
        "/manifests/sha256-",
    )
    .await;
    let key = Signer::p256();
    let mut second = AppSpec::new("slow");
    second.registry = Some(slow.host());
    let dir = tempfile::tempdir().unwrap();
    let trust = trust_toml(&[key.pem()], dir.path(), "").replace(
        "{registry}/demo/*",
        &format!("{}/demo/*\", \"{}/demo/*", huge.host(), slow.host()),
    );
    let env = TestEnv::builder()
        .without_notifications()
        .app(|a| a.registry = Some(huge.host()))
        .add_app(second)
        .registries_toml(&huge.registry_toml(""))
        .registries_toml(&slow.registry_toml("first_byte_timeout = \"2s\"\ntimeout = \"3s\""))
        .server_toml("retry_budget = \"4s\"")
        .sources_toml(&trust)
        .start()
        .await;
    for double in [&huge, &slow] {
        double.set_upstream(&env.registry().url());
    }
    let image = TestImage::healthy("v1");
    let mut digests = BTreeMap::new();
    for a in &env.apps {
        digests.insert(
            a.name.clone(),
            env.registry().push(&a.repo, "main", &image).await,
        );
    }
    let (a, b) = tokio::join!(
        deploy(&env, &env.apps[0].name),
        deploy(&env, &env.apps[1].name)
    );
    let error = a["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("signature:") && error.contains("larger than the 4 MiB cap"),
        "{error}"
    );
    let error = b["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("signature:") && error.contains("not complete within 3s"),
        "{error}"
    );
    assert!(
        huge.body_bytes_sent() < 64 << 20,
        "{} bytes",
        huge.body_bytes_sent()
    );
    for d in [&a, &b] {
        assert_eq!(d["state"], "failed", "{d:#}");
        assert!(!steps_of(d).contains(&"pull"), "{d:#}");
    }
    env.cleanup().await;
}

/// `pier deploy APP`, then the deployment once final.
async fn deploy(env: &TestEnv, app: &str) -> Value {
    let out = env.pier().run_cli(&["deploy", app]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("queued deployment "))
        .unwrap_or_else(|| panic!("no deployment queued: {stdout}"))
        .trim()
        .to_owned();
    env.deployment_final(&id, DEPLOY).await
}
