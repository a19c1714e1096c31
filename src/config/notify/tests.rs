use std::path::Path;

use super::*;

fn one(toml: &str) -> Result<NotificationConfig, ConfigError> {
    let raw: RawNotification = toml::from_str(&format!("name = \"n\"\n{toml}")).expect("shape");
    raw.resolve(Path::new("."), (&[][..], &[][..]))
}

#[test]
fn each_format_without_its_required_field_is_an_error_naming_the_field() {
    for (toml, field) in [
        ("format = \"discord\"", "`url`"),
        ("format = \"teams\"", "`url`"),
        ("format = \"ntfy\"", "`url`"),
        ("format = \"telegram\"\nchat_id = \"-100\"", "`bot_token`"),
        ("format = \"telegram\"\nbot_token = \"1:abc\"", "`chat_id`"),
        (
            "format = \"matrix\"\nhomeserver = \"https://m.example\"\naccess_token = \"t\"",
            "`room_id`",
        ),
        (
            "format = \"matrix\"\nhomeserver = \"https://m.example\"\nroom_id = \"!r:m\"",
            "`access_token`",
        ),
        (
            "format = \"email\"\nfrom = \"a@b.c\"\nto = [\"d@e.f\"]",
            "`smtp_host`",
        ),
        (
            "format = \"email\"\nsmtp_host = \"mail\"\nto = [\"d@e.f\"]",
            "`from`",
        ),
        (
            "format = \"email\"\nsmtp_host = \"mail\"\nfrom = \"a@b.c\"",
            "`to`",
        ),
        ("url = \"https://x.example\"", "`format`"),
    ] {
        let e = one(toml).unwrap_err().to_string();
        assert!(e.contains(field), "{toml}: {e}");
        assert!(e.contains("notification `n`"), "{e}");
    }
}

#[test]
fn a_field_of_another_format_is_refused_by_name() {
    let e = one("format = \"slack\"\nurl = \"https://h.example/x\"\nchat_id = \"1\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes no `chat_id`"), "{e}");
    let e = one("format = \"discord\"\nurl = \"https://h.example/x\"\nto = [\"a@b.c\"]")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`to`"), "{e}");
}

#[test]
fn every_format_resolves_to_its_own_destination() {
    let t = one("format = \"telegram\"\nbot_token = \"123:AbC_d-e\"\nchat_id = \"-100\"").unwrap();
    assert!(matches!(
        &t.destination,
        Destination::Telegram { api_url, chat_id, .. }
            if api_url == "https://api.telegram.org" && chat_id == "-100"
    ));
    let m = one(
        "format = \"matrix\"\nhomeserver = \"https://m.example/\"\nroom_id = \"!r:m.example\"\n\
         access_token = \"syt_x\"",
    )
    .unwrap();
    assert_eq!(m.format(), NotifyFormat::Matrix);
    let e = one(
        "format = \"email\"\nsmtp_host = \"mail.example\"\nsmtp_tls = \"tls\"\n\
         from = \"Pier <pier@example.com>\"\nto = [\"ops@example.com\"]",
    )
    .unwrap();
    let Destination::Email(mail) = &e.destination else {
        panic!("{e:?}")
    };
    assert_eq!((mail.port, mail.tls), (465, SmtpTls::Tls));
    let n = one("format = \"ntfy\"\nurl = \"https://ntfy.example/pier\"\nrate_limit = \"5/s\"")
        .unwrap();
    assert_eq!(
        n.rate_limit,
        RateLimit {
            count: 5,
            per: Duration::from_secs(1)
        }
    );
}

#[test]
fn a_telegram_token_that_would_change_the_path_and_a_bad_rate_are_refused() {
    let e = one("format = \"telegram\"\nbot_token = \"1:a/../x\"\nchat_id = \"1\"").unwrap_err();
    assert!(e.to_string().contains("bot_token"), "{e}");
    assert!(
        !e.to_string().contains("a/../x"),
        "the token is never shown: {e}"
    );
    let e =
        one("format = \"slack\"\nurl = \"https://h.example\"\nrate_limit = \"fast\"").unwrap_err();
    assert!(e.to_string().contains("rate_limit"), "{e}");
}

#[test]
fn an_approver_must_be_a_named_admin() {
    let e =
        one("format = \"slack\"\nurl = \"https://h.example\"\napprover = \"ghost\"").unwrap_err();
    assert!(e.to_string().contains("approver `ghost`"), "{e}");
}
