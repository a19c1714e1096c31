//! Email over SMTP with lettre, as text and HTML: STARTTLS (required, never skipped) or TLS from the first
//! byte, on rustls with Pier's one crypto provider, trusting `smtp_ca` instead of the
//! system's roots when given. The whole exchange, connect to QUIT, has the endpoint's
//! deadline: a server that accepts the connection and never speaks fails the attempt.

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::super::message::Message;
use super::super::outcome::Attempt;
use super::Call;
use crate::config::{EmailChannel, SmtpTls};
use crate::error::error_chain;

/// Why a message could not be handed to the SMTP server.
#[derive(Debug, thiserror::Error)]
enum MailError {
    #[error("build the message: {0}")]
    Message(#[from] lettre::error::Error),
    #[error("an address: {0}")]
    Address(#[from] lettre::address::AddressError),
    #[error("read smtp_ca: {0}")]
    Ca(std::io::Error),
    #[error("SMTP: {0}")]
    Smtp(#[from] lettre::transport::smtp::Error),
}

fn message(mail: &EmailChannel, msg: &Message) -> Result<lettre::Message, MailError> {
    let mut b = lettre::Message::builder()
        .from(mail.from.parse::<Mailbox>()?)
        .subject(&msg.title);
    for to in &mail.to {
        b = b.to(to.parse::<Mailbox>()?);
    }
    // Text for every client, the same as HTML (every value escaped) for those that show it.
    let html = format!(
        "<!doctype html><html><body><p>{}</p></body></html>",
        msg.html().replace('\n', "<br>\n")
    );
    Ok(b.multipart(MultiPart::alternative_plain_html(msg.text(), html))?)
}

fn transport(
    mail: &EmailChannel,
    timeout: std::time::Duration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, MailError> {
    let mut tls = TlsParameters::builder(mail.host.clone());
    if let Some(ca) = &mail.ca_file {
        let pem = std::fs::read(ca).map_err(MailError::Ca)?;
        tls = tls
            .certificate_store(CertificateStore::None)
            .add_root_certificate(Certificate::from_pem(&pem)?);
    }
    let tls = tls.build_rustls()?;
    let mut t = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(mail.host.as_str())
        .port(mail.port)
        .timeout(Some(timeout))
        .tls(match mail.tls {
            SmtpTls::Starttls => Tls::Required(tls),
            SmtpTls::Tls => Tls::Wrapper(tls),
        });
    if let Some((user, password)) = &mail.credentials {
        t = t.credentials(Credentials::new(user.clone(), password.expose().to_owned()));
    }
    Ok(t.build())
}

async fn send_mail(call: &Call<'_>, mail: &EmailChannel, msg: &Message) -> Result<(), MailError> {
    let m = message(mail, msg)?;
    transport(mail, call.timeout)?.send(m).await?;
    Ok(())
}

pub(super) async fn send(call: &Call<'_>, mail: &EmailChannel, msg: &Message) -> Attempt {
    let late = || {
        Attempt::failed(format!(
            "the SMTP server {}:{} did not finish within {:?}",
            mail.host, mail.port, call.timeout
        ))
    };
    // lettre's own per-read deadline and this one for the whole exchange say the same.
    match tokio::time::timeout(call.timeout, send_mail(call, mail, msg)).await {
        Ok(Ok(())) => Attempt::Sent { status: None },
        Ok(Err(MailError::Smtp(e))) if e.is_timeout() => late(),
        Ok(Err(e)) => Attempt::failed(error_chain(&e)),
        Err(_) => late(),
    }
}
