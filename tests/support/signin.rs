//! A browser's side of the status page without a browser: sign in, keep the session
//! cookie, read a page's form token, post forms with the headers a browser would send.

use std::time::Duration;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

/// What a page or form answered: status, body, and where it redirects to.
#[derive(Debug)]
pub struct PageAnswer {
    pub status: u16,
    pub body: String,
    pub location: Option<String>,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .expect("build reqwest client")
}

async fn answer(resp: reqwest::Response) -> PageAnswer {
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    PageAnswer {
        status,
        body: resp.text().await.unwrap_or_default(),
        location,
    }
}

/// `POST /login` with this name and secret: the answer and the `Set-Cookie` header, if any.
pub async fn post_login(base: &str, user: &str, secret: &str) -> (PageAnswer, Option<String>) {
    let resp = client()
        .post(format!("{base}/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Sec-Fetch-Site", "same-origin")
        .body(
            serde_urlencoded::to_string([("user", user), ("secret", secret), ("next", "/")])
                .unwrap(),
        )
        .send()
        .await
        .expect("POST /login answers");
    let cookie = resp
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (answer(resp).await, cookie)
}

/// A signed-in browser.
pub struct SignedIn {
    pub base: String,
    /// `name=value` of the session cookie.
    pub cookie: String,
    /// The whole `Set-Cookie` header it came in.
    pub set_cookie: String,
}

impl SignedIn {
    pub async fn new(base: &str, user: &str, secret: &str) -> SignedIn {
        let (a, set_cookie) = post_login(base, user, secret).await;
        assert_eq!(a.status, 303, "sign-in answered {a:?}");
        let set_cookie = set_cookie.expect("a session cookie");
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        SignedIn {
            base: base.to_owned(),
            cookie,
            set_cookie,
        }
    }

    pub async fn get(&self, path: &str) -> PageAnswer {
        let resp = client()
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .expect("GET answers");
        answer(resp).await
    }

    /// The form token on the page at `path`.
    pub async fn form_token(&self, path: &str) -> String {
        let page = self.get(path).await;
        form_token_in(&page.body).unwrap_or_else(|| panic!("no form token on {path}: {page:?}"))
    }

    /// Posts a form as a browser on this site would (`Sec-Fetch-Site: same-origin`), plus
    /// `headers` (which may say otherwise).
    pub async fn post(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> PageAnswer {
        let mut req = client()
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(fields).unwrap());
        let mut same_origin = true;
        for (k, v) in headers {
            if k.eq_ignore_ascii_case("sec-fetch-site") {
                same_origin = false;
            }
            req = req.header(*k, *v);
        }
        if same_origin {
            req = req.header("Sec-Fetch-Site", "same-origin");
        }
        answer(req.send().await.expect("POST answers")).await
    }
}

/// `GET` without a session.
pub async fn get_anonymous(url: &str) -> PageAnswer {
    answer(client().get(url).send().await.expect("GET answers")).await
}

/// `POST` a form without a session.
pub async fn post_anonymous(url: &str, body: &str, headers: &[(&str, &str)]) -> PageAnswer {
    let mut req = client()
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    answer(req.send().await.expect("POST answers")).await
}

pub fn form_token_in(html: &str) -> Option<String> {
    let at = html.find("name=\"form_token\" value=\"")?;
    let rest = &html[at + "name=\"form_token\" value=\"".len()..];
    Some(rest.split('"').next()?.to_owned())
}
