//! Email notifications through a real SMTP server: Python's aiosmtpd, started by the test
//! on a loopback port, requiring STARTTLS (a certificate from a CA the test makes with
//! rcgen, which Pier trusts through `smtp_ca`) and a login. The message is read back from
//! the server's mailbox folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// An SMTP server on 127.0.0.1 that requires STARTTLS (`starttls`) or speaks TLS from the
/// first byte (`tls`), and `pier`/`password`; it writes each message it accepts to
/// `<dir>/<n>.eml`.
const SERVER: &str = r#"
import os, ssl, sys, time
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
port, cert, key, box, password, mode = sys.argv[1:7]
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(cert, key)
def login(server, session, envelope, mechanism, data):
    return AuthResult(success=(data.login == b"pier" and data.password == password.encode()))
class Save:
    async def handle_DATA(self, server, session, envelope):
        n = len([f for f in os.listdir(box) if f.endswith(".eml")])
        path = os.path.join(box, "%d.eml" % n)
        with open(path + ".part", "wb") as f:
            f.write(b"X-Rcpt: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(envelope.original_content or envelope.content)
        os.rename(path + ".part", path)
        return "250 OK"
if mode == "starttls":
    c = Controller(Save(), hostname="127.0.0.1", port=int(port), tls_context=ctx,
                   require_starttls=True, authenticator=login, auth_required=True)
else:
    # TLS from the first byte: the connection is encrypted before AUTH.
    c = Controller(Save(), hostname="127.0.0.1", port=int(port), ssl_context=ctx,
                   authenticator=login, auth_required=True, auth_require_tls=False)
c.start()
while True:
    time.sleep(3600)
"#;

struct SmtpServer {
    port: u16,
    dir: tempfile::TempDir,
    ca: PathBuf,
    child: Child,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SmtpServer {
    async fn start(password: &str, mode: &str) -> SmtpServer {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("pier-test-smtp-ca");
        let pair = ca.server(&["127.0.0.1".parse().unwrap()]);
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (cert, key, ca_file) = (
            write("server.pem", &pair.cert_pem),
            write("server.key", &pair.key_pem),
            write("ca.pem", ca.pem()),
        );
        let boxdir = dir.path().join("mailbox");
        std::fs::create_dir(&boxdir).unwrap();
        let port = free_port();
        let child = Command::new("python3")
            .arg("-c")
            .arg(SERVER)
            .args([
                &port.to_string(),
                path(&cert),
                path(&key),
                path(&boxdir),
                password,
                mode,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (aiosmtpd: pip install aiosmtpd; scripts/test does)");
        let server = SmtpServer {
            port,
            dir,
            ca: ca_file,
            child,
        };
        wait_until(
            "the SMTP server listens",
            Duration::from_secs(30),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
        server
    }

    /// The messages received so far, in order.
    fn mailbox(&self) -> Vec<String> {
        let boxdir = self.dir.path().join("mailbox");
        let mut names: Vec<String> = std::fs::read_dir(&boxdir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".eml"))
            .collect();
        names.sort_by_key(|n| n.trim_end_matches(".eml").parse::<u32>().unwrap_or(0));
        names
            .iter()
            .map(|n| std::fs::read_to_string(boxdir.join(n)).unwrap())
            .collect()
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The body of an email, soft line breaks of quoted-printable undone.
fn unfolded(mail: &str) -> String {
    mail.replace("=\r\n", "")
        .replace("=\n", "")
        .replace("=3D", "=")
}

#[tokio::test]
async fn an_approval_request_reaches_the_mailbox_over_starttls_and_tls_with_its_subject_and_links()
{
    let password = random_hex(24);
    let (smtp, smtps) = tokio::join!(
        SmtpServer::start(&password, "starttls"),
        SmtpServer::start(&password, "tls")
    );
    let (admins, _) = crate::approvals::admins();
    let env = TestEnv::builder()
        .pier_env("PIER_TEST_SMTP_PASSWORD", &password)
        .sources_toml(&format!(
            "{admins}\n[[notifications]]\nname = \"mail\"\nformat = \"email\"\n\
             smtp_host = \"127.0.0.1\"\nsmtp_port = {}\nsmtp_tls = \"starttls\"\n\
             smtp_user = \"pier\"\nsmtp_password = \"env:PIER_TEST_SMTP_PASSWORD\"\n\
             smtp_ca = \"{}\"\nfrom = \"Pier <pier@example.org>\"\n\
             to = [\"ops@example.org\", \"release@example.org\"]\n\
             events = [\"deployment.awaiting_approval\"]\napprover = \"ops\"\n\
             [[notifications]]\nname = \"mail-tls\"\nformat = \"email\"\n\
             smtp_host = \"127.0.0.1\"\nsmtp_port = {}\nsmtp_tls = \"tls\"\n\
             smtp_user = \"pier\"\nsmtp_password = \"env:PIER_TEST_SMTP_PASSWORD\"\n\
             smtp_ca = \"{}\"\nfrom = \"pier@example.org\"\nto = [\"ops@example.org\"]\n\
             events = [\"deployment.awaiting_approval\"]\n",
            smtp.port,
            path(&smtp.ca),
            smtps.port,
            path(&smtps.ca),
        ))
        .app(|a| {
            a.extra_toml =
                "approval = { required = 1, from = [\"ops\", \"release\"], expires = \"1h\" }"
                    .into()
        })
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;

    let mail = wait_until("the approval request is in the mailbox", DEPLOY, || async {
        smtp.mailbox().into_iter().next()
    })
    .await;
    let (_, d) = env.api_get(&format!("/apps/{app}")).await;
    let id = d["latest_deployment"]["id"].as_str().unwrap().to_owned();
    assert!(
        mail.starts_with("X-Rcpt: ops@example.org,release@example.org"),
        "{mail}"
    );
    assert!(
        mail.contains(&format!("Subject: {app}: deployment waits for approval")),
        "{mail}"
    );
    assert!(mail.contains("From: Pier <pier@example.org>"), "{mail}");
    assert!(mail.contains("Content-Type: text/plain"), "{mail}");
    assert!(mail.contains("Content-Type: text/html"), "{mail}");
    let body = unfolded(&mail);
    let base = env.pier_url(&format!("/deployments/{id}"));
    assert!(
        body.contains(&format!("{base}/link?action=approve&for=ops&")),
        "{body}"
    );
    assert!(
        body.contains(&format!("{base}/link?action=reject&for=ops&")),
        "{body}"
    );
    assert!(
        body.contains("Waits for: 1 approval(s) of ops, release"),
        "{body}"
    );

    // The same over TLS from the first byte, with links for any approver.
    let tls_mail = wait_until("the TLS server got its mail too", DEPLOY, || async {
        smtps.mailbox().into_iter().next()
    })
    .await;
    let tls_body = unfolded(&tls_mail);
    assert!(
        tls_body.contains(&format!("{base}/link?action=approve&expires=")),
        "{tls_body}"
    );

    let log = wait_until("both mails are logged as sent", DEPLOY, || async {
        let (_, log) = env.api_get("/notifications").await;
        let all = log["notifications"].as_array()?.clone();
        (all.len() == 2 && all.iter().all(|n| n["state"] == "sent")).then_some(all)
    })
    .await;
    assert!(
        log.iter().all(|n| n["log"][0]["error"].is_null()),
        "{log:#?}"
    );
    assert!(!env.pier().log().contains(&password));
    env.cleanup().await;
}
