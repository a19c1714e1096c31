//! `pier proxy --target NAME` on an extra engine's host: the proxy that sends that engine's
//! HTTP health probes (the app publishes on the namespace's loopback, which Pier cannot
//! reach) and serves its routes. The namespace must reach Postgres:
//! [`super::ExtraEngineBuilder::forward`] the database's port.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::ExtraEngine;
use crate::support::{PierProcess, TestEnv, wait_until};

/// How long a proxy may take to answer on its admin port on a loaded machine.
const PROXY_READY: Duration = Duration::from_secs(30);

impl ExtraEngine {
    /// `pier proxy --target target` with `env`'s config, inside this engine's namespace as
    /// on that host; returned once its admin endpoint answers there. Its routes file is
    /// this engine's own: two proxies sharing one would each start from the other's routes.
    pub async fn start_proxy(&self, env: &TestEnv, target: &str) -> PierProcess {
        let wrapper = self.dir().join("pier-in-namespace");
        // `nsenter --net` without `--fork`: the proxy keeps the pid the wrapper was started
        // with, which is the pid its probe results name.
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec nsenter --net=/var/run/netns/{} -- {} \"$@\"\n",
                self.netns(),
                env!("CARGO_BIN_EXE_pier")
            ),
        )
        .expect("write the namespace wrapper");
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .expect("make the namespace wrapper executable");
        let state = self.dir().join("proxy-routes.json");
        let proxy = env
            .proxy_command(&state)
            .program(&wrapper)
            .args(["proxy", "--target", target])
            .start()
            .await;
        let admin = env.proxy_admin_port;
        wait_until(
            "pier proxy answers on its admin port inside the namespace",
            PROXY_READY,
            || async {
                matches!(
                    self.http_get_inside(admin, "/healthz").await,
                    Some((200, _))
                )
                .then_some(())
            },
        )
        .await;
        proxy
    }
}
