use std::path::Path;

use super::super::Config;
use super::*;

const SERVER: &str = "[server]\ndatabase_url = \"postgres://localhost/pier\"\n";

/// One app `web` with `lines`, recreate unless they say otherwise.
fn app(lines: &str) -> Result<Config, String> {
    apps(&[("web", lines)])
}

fn apps(list: &[(&str, &str)]) -> Result<Config, String> {
    let mut text = SERVER.to_owned();
    for (name, lines) in list {
        text.push_str(&format!(
            "[[apps]]\nname = \"{name}\"\nimage = \"127.0.0.1:5000/demo/{name}\"\n{lines}\n"
        ));
    }
    Config::parse(&text, Path::new(".")).map_err(|e| e.to_string())
}

const BLUE_GREEN: &str = "strategy = \"blue-green\"\n[apps.route]\nlisten = \"127.0.0.1:9000\"\n";

const THREE: &str = "ports = [{ container = 8080 }, { container = 9090, name = \"metrics\" }, \
                     { container = 5353, protocol = \"udp\" }]\n";

fn summary(p: &Ports) -> Vec<String> {
    p.iter()
        .map(|p| match p.publish {
            Some(a) => format!("{} {} -> {a}", p.name, p.key()),
            None => format!("{} {}", p.name, p.key()),
        })
        .collect()
}

#[test]
fn port_alone_is_one_tcp_port_that_is_the_http_port_as_before() {
    let c = app("port = 8080\npublish = \"127.0.0.1:8081\"").unwrap();
    let a = &c.apps[0];
    assert_eq!(summary(&a.ports), ["http 8080/tcp -> 127.0.0.1:8081"]);
    assert_eq!(a.port(), 8080);
    assert_eq!(a.publish(), Some("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(a.ports, Ports::single(8080, a.publish()));
}

#[test]
fn several_ports_keep_their_order_and_the_first_tcp_one_is_the_http_port() {
    let c = app(&format!("{THREE}{BLUE_GREEN}")).unwrap();
    let a = &c.apps[0];
    assert_eq!(
        summary(&a.ports),
        ["http 8080/tcp", "metrics 9090/tcp", "5353-udp 5353/udp"]
    );
    assert_eq!(a.port(), 8080);
    let others: Vec<String> = a.ports.others().map(PortConfig::key).collect();
    assert_eq!(others, ["9090/tcp", "5353/udp"]);
}

#[test]
fn http_true_marks_the_http_port_wherever_it_is_listed() {
    let c = app(
        "ports = [{ container = 5353, protocol = \"udp\", name = \"dns\" }, \
         { container = 9090, name = \"metrics\" }, { container = 8080, http = true }]\n\
         publish_public = true\n",
    );
    // publish_public without any publish acknowledges nothing.
    assert!(c.unwrap_err().contains("publish_public = true needs"));
    let c = app(
        "ports = [{ container = 5353, protocol = \"udp\", name = \"dns\" }, \
         { container = 9090, name = \"metrics\" }, \
         { container = 8080, http = true, publish = \"127.0.0.1:8081\" }]\n\
         health = { path = \"/health\" }\n",
    )
    .unwrap();
    let a = &c.apps[0];
    assert_eq!(a.port(), 8080);
    assert_eq!(a.ports.http().name, "http");
    assert_eq!(a.publish(), Some("127.0.0.1:8081".parse().unwrap()));
}

#[test]
fn a_recreate_app_publishes_each_port_that_names_an_address() {
    let c = app(
        "ports = [{ container = 8080, publish = \"127.0.0.1:8081\" }, \
         { container = 5353, protocol = \"udp\", publish = \"127.0.0.1:8081\" }, \
         { container = 9090, name = \"metrics\" }]\n",
    )
    .unwrap();
    // TCP and UDP on one host port are two sockets.
    assert_eq!(
        summary(&c.apps[0].ports),
        [
            "http 8080/tcp -> 127.0.0.1:8081",
            "5353-udp 5353/udp -> 127.0.0.1:8081",
            "metrics 9090/tcp"
        ]
    );
}

#[test]
fn a_udp_port_marked_http_is_refused_naming_the_key() {
    let e = app(
        "ports = [{ container = 8080 }, { container = 5353, protocol = \"udp\", http = true }]",
    )
    .unwrap_err();
    assert!(e.contains("app `web`: ports[1].http"), "{e}");
    assert!(e.contains("5353/udp cannot be the HTTP port"), "{e}");
    let e = app(
        "ports = [{ container = 8080 }, { container = 5353, protocol = \"udp\", name = \"http\" }]",
    )
    .unwrap_err();
    assert!(e.contains("app `web`: ports[1].name"), "{e}");
    assert!(e.contains("a UDP port cannot be the HTTP port"), "{e}");
    let e = app("ports = [{ container = 5353, protocol = \"udp\" }]").unwrap_err();
    assert!(e.contains("ports: list a TCP port"), "{e}");
}

#[test]
fn two_services_publishing_the_same_port_are_refused_naming_both_keys() {
    // Two ports of one app.
    let e = app(
        "ports = [{ container = 8080, publish = \"127.0.0.1:8081\" }, \
         { container = 9090, publish = \"0.0.0.0:8081\" }]\npublish_public = true",
    )
    .unwrap_err();
    assert!(
        e.contains("ports[0].publish and ports[1].publish both publish 0.0.0.0:8081/tcp"),
        "{e}"
    );
    // Two apps on one engine, one written with `port`, one with `ports`.
    let e = apps(&[
        ("web", "port = 8080\npublish = \"127.0.0.1:8081\""),
        (
            "api",
            "ports = [{ container = 80 }, { container = 81, publish = \"127.0.0.1:8081\" }]",
        ),
    ])
    .unwrap_err();
    assert!(
        e.contains(
            "apps `web` (publish = \"127.0.0.1:8081\") and `api` (ports[1].publish = \
             \"127.0.0.1:8081\") both publish 8081/tcp"
        ),
        "{e}"
    );
    // Other protocols or other addresses of the host are other sockets.
    apps(&[
        ("web", "port = 8080\npublish = \"127.0.0.1:8081\""),
        (
            "dns",
            "ports = [{ container = 80 }, { container = 53, protocol = \"udp\", publish = \"127.0.0.1:8081\" }]",
        ),
        ("api", "port = 8080\npublish = \"127.0.0.2:8081\""),
    ])
    .unwrap();
}

#[test]
fn the_same_container_port_or_name_twice_is_refused() {
    let cases = [
        (
            "ports = [{ container = 8080 }, { container = 8080, protocol = \"tcp\" }]",
            "ports[0] and ports[1] both list 8080/tcp",
        ),
        (
            "ports = [{ container = 8080 }, { container = 9, name = \"m\" }, { container = 10, name = \"m\" }]",
            "ports[1] and ports[2] are both named `m`",
        ),
        (
            "ports = [{ container = 8080, http = true }, { container = 9, http = true }]",
            "ports[0] and ports[1] both say `http = true`",
        ),
        (
            "ports = [{ container = 8080 }, { container = 9, name = \"http\" }]",
            "mark this port `http = true`",
        ),
        (
            "ports = [{ container = 8080, name = \"Web\" }]",
            "ports[0].name `Web`",
        ),
        ("ports = []", "ports: list 1 to 32 ports"),
        ("ports = [{ container = 0 }]", "ports[0].container"),
        (
            "ports = [{ container = 8080, protocol = \"sctp\" }]",
            "unknown variant `sctp`",
        ),
    ];
    for (lines, want) in cases {
        let e = app(lines).unwrap_err();
        assert!(e.contains(want), "{lines}: {e}");
    }
}

#[test]
fn port_and_ports_together_or_neither_are_refused() {
    let e = app("port = 8080\nports = [{ container = 8080 }]").unwrap_err();
    assert!(e.contains("give `port` or `ports`, not both"), "{e}");
    let e = app("").unwrap_err();
    assert!(e.contains("`port = 8080`, or `ports"), "{e}");
    let e = app("ports = [{ container = 8080 }]\npublish = \"127.0.0.1:8081\"").unwrap_err();
    assert!(e.contains("`publish` goes with `port`"), "{e}");
}

#[test]
fn blue_green_ports_have_no_fixed_publish_and_every_interface_needs_publish_public() {
    let e = app(&format!(
        "ports = [{{ container = 8080 }}, {{ container = 9090, publish = \"127.0.0.1:9091\" }}]\n{BLUE_GREEN}"
    ))
    .unwrap_err();
    assert!(
        e.contains("ports[1].publish: a blue-green app publishes each port"),
        "{e}"
    );
    let e = app("ports = [{ container = 8080 }, { container = 53, protocol = \"udp\", publish = \"0.0.0.0:53\" }]")
        .unwrap_err();
    assert!(
        e.contains("app `web`: ports[1].publish = \"0.0.0.0:53\" listens on every interface"),
        "{e}"
    );
    assert!(e.contains("publish_public = true"), "{e}");
    let c = app(
        "ports = [{ container = 8080 }, { container = 53, protocol = \"udp\", publish = \"0.0.0.0:53\" }]\n\
         publish_public = true",
    )
    .unwrap();
    assert_eq!(
        c.apps[0].public_publish(),
        Some("0.0.0.0:53".parse().unwrap())
    );
}

#[test]
fn a_further_service_has_the_apps_ports_unpublished_and_no_ports_of_its_own() {
    let c = app(
        "ports = [{ container = 8080, publish = \"127.0.0.1:8081\" }, { container = 9090 }]\n\
         [apps.services.worker]\n",
    )
    .unwrap();
    let w = &c.apps[0].services[0];
    assert_eq!(summary(&w.ports), ["http 8080/tcp", "9090-tcp 9090/tcp"]);
    let e = app("port = 8080\n[apps.services.worker]\nports = [{ container = 1 }]").unwrap_err();
    assert!(e.contains("`ports` is for the app's primary"), "{e}");
}
