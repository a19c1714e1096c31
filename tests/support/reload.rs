//! Changing a running Pier's config: the file rewritten, then `pier reload`.

use super::*;

/// The config text without the `[[apps]]` table (and its sub-tables) of `name`.
pub fn without_app(toml: &str, name: &str) -> String {
    let mut parts = toml.split("\n[[");
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        let is_it = part.starts_with("apps]]") && part.contains(&format!("name = \"{name}\""));
        if !is_it {
            out.push_str("\n[[");
            out.push_str(part);
        }
    }
    out
}

impl TestEnv {
    /// The config file the running `pier serve` was started with (or last reloaded).
    pub fn config_text(&self) -> String {
        std::fs::read_to_string(self.pier().config_path()).expect("read pier.toml")
    }

    /// Makes the running `pier serve` reload `toml`, and waits until it has (the `n`th
    /// successful reload since start).
    pub async fn reload(&self, toml: &str, n: usize, timeout: Duration) {
        std::fs::write(self.pier().config_path(), toml).unwrap();
        let pid = self.pier().pid().unwrap().to_string();
        let out = self.pier().run_cli(&["reload", "--pid", &pid]).await;
        assert!(out.status.success(), "{out:?}");
        wait_until("the reload is done", timeout, || async {
            (self.pier().log().matches("configuration reloaded").count() >= n).then_some(())
        })
        .await;
    }
}
