//! Who owns a socket, and how a process is named: container ids, interpreters and their
//! scripts, units from cgroup paths, hostile bytes escaped.

mod owner_tests {
    use super::super::*;

    #[test]
    fn finds_the_owner_of_our_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = nagless_host::fd::inode_of(std::os::fd::AsFd::as_fd(&l)).unwrap() as u32;
        let mut m = ProcMap::default();
        m.rescan();
        let p = m.owner(inode).unwrap();
        assert_eq!(p.pid, std::process::id());
        assert!(!p.cmd.is_empty());
        assert!(!p.program.is_empty() && !p.program.contains('/'), "{p:?}");
        assert!(p.cgroup.starts_with('/'), "{p:?}");
        assert!(euid().is_some());
    }

    #[test]
    fn an_unknown_inode_is_walked_for_three_times_and_no_more_often_than_asked() {
        // An inode no process holds (sock_diag's are 32 bits; this one is far past any here).
        const NOBODY: u32 = u32::MAX - 7;
        let mut w = Walked::new(ProcMap::default(), Duration::ZERO);
        for _ in 0..Walked::TRIES {
            assert!(!w.given_up(NOBODY));
            w.look_for(&[NOBODY]);
        }
        assert!(w.given_up(NOBODY));
        // A socket opened after that is found by the next walk all the same.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = nagless_host::fd::inode_of(std::os::fd::AsFd::as_fd(&l)).unwrap() as u32;
        assert!(w.owner(inode).is_none());
        w.look_for(&[NOBODY, inode]);
        assert_eq!(w.owner(inode).map(|p| p.pid), Some(std::process::id()));
        // Forgotten once gone, then tried afresh.
        w.keep_only(&HashSet::from([inode]));
        assert!(!w.given_up(NOBODY));
        // At most one walk per `every`: a second ask within it walks nothing.
        let mut w = Walked::new(ProcMap::default(), Duration::from_secs(3600));
        w.look_for(&[NOBODY]);
        let l2 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode2 = nagless_host::fd::inode_of(std::os::fd::AsFd::as_fd(&l2)).unwrap() as u32;
        w.look_for(&[NOBODY, inode2]);
        assert!(w.owner(inode2).is_none());
        assert!(!w.given_up(NOBODY));
    }

    #[test]
    fn container_ids_of_the_usual_runtimes() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/besteffort/pod1a2b3c4d-0000-1111-2222-333344445555/{id}"),
            format!("/kubepods.slice/kubepods-pod1a2b.slice/crio-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{id}.scope"),
        ] {
            assert_eq!(container_id(&path).as_deref(), Some(id), "{path}");
        }
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-2.scope",
            "/system.slice/nginx.service",
            // 63 and 65 hex digits: not an id.
            "/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
            "/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        ] {
            assert_eq!(container_id(path), None, "{path}");
        }
    }
}

mod program_tests {
    use super::super::{program_name, unit};

    fn name(cmdline: &str) -> String {
        program_name(&cmdline.split(' ').collect::<Vec<_>>())
    }

    #[test]
    fn interpreters_are_named_by_what_they_run() {
        for (argv, shown) in [
            (
                "/usr/bin/python3 -u /srv/app/app.py --port 80",
                "python3 app.py --port 80",
            ),
            (
                "/root/.pyenv/versions/3.11.7/bin/python3.11 -X dev -W ignore worker.py",
                "python3.11 worker.py",
            ),
            (
                "python3 -m http.server --bind 127.0.0.1 8000",
                "python3 -m http.server --bind 127.0.0.1 8000",
            ),
            ("python3 -uBm http.server", "python3 -uBm http.server"),
            ("python3 -Wignore -c import;x 1", "python3 -c import;x 1"),
            ("python3 -- /x/-odd.py", "python3 -odd.py"),
            (
                "/usr/lib/jvm/bin/java -Xmx2g -cp /a.jar:/b.jar -Dx=y com.example.Main 9",
                "java com.example.Main 9",
            ),
            ("java -classpath lib/* @opts org.Main", "java org.Main"),
            (
                "java -server -jar /opt/svc/app.jar --spring.profiles.active=prod",
                "java -jar app.jar --spring.profiles.active=prod",
            ),
            (
                "java --module-path mods -m app/org.App",
                "java -m app/org.App",
            ),
            (
                "node --max-old-space-size=512 -r dotenv/config /srv/server.js",
                "node server.js",
            ),
            ("node -e require('x')", "node -e require('x')"),
            (
                "/bin/bash /usr/local/bin/script.sh start",
                "bash script.sh start",
            ),
            ("/bin/sh -ec exec x", "sh -ec exec x"),
            ("bash -o pipefail run.sh", "bash run.sh"),
            ("perl -I /lib -w /usr/bin/munin-node", "perl munin-node"),
            ("perl -i.bak -e print", "perl -e print"),
            (
                "ruby -r bundler/setup bin/rails server",
                "ruby rails server",
            ),
            ("php -d x=1 -f /var/www/index.php", "php -f index.php"),
            (
                "php -S 0.0.0.0:8000 -t public",
                "php -S 0.0.0.0:8000 -t public",
            ),
            ("python3", "python3"),
            ("python3 @odd.py", "python3 @odd.py"),
        ] {
            assert_eq!(name(argv), shown, "{argv}");
        }
    }

    #[test]
    fn other_programs_are_named_by_their_file_and_arguments() {
        assert_eq!(
            name("/usr/bin/redis-server 127.0.0.1:6379"),
            "redis-server 127.0.0.1:6379"
        );
        assert_eq!(name("./vendor-daemon"), "vendor-daemon");
        // A title set with setproctitle: kept whole.
        assert_eq!(
            program_name(&["nginx: worker process /etc/x/y"]),
            "nginx: worker process /etc/x/y"
        );
        assert_eq!(program_name(&[]), "");
        // An argument with spaces stays one, with the script first.
        assert_eq!(
            program_name(&["python3", "/a b/c d.py", "x y"]),
            "python3 c d.py x y"
        );
    }

    #[test]
    fn hostile_bytes_are_escaped() {
        assert_eq!(
            program_name(&["python3", "/tmp/\u{1b}]0;pwned\u{7}.py", "\u{9b}31m"]),
            "python3 \\x1b]0;pwned\\x07.py \\x9b31m"
        );
        assert_eq!(
            program_name(&["/x/evil\u{202e}txt", "\u{1b}[2J"]),
            "evil\\u{202e}txt \\x1b[2J"
        );
        assert_eq!(
            unit("/system.slice/a\u{1b}[2J.service").as_deref(),
            Some("a\\x1b[2J.service")
        );
    }

    #[test]
    fn units_from_cgroup_paths() {
        let id = "0123456789abcdef".repeat(4);
        for (path, want) in [
            ("/system.slice/nginx.service", Some("nginx.service")),
            (
                "/system.slice/redis-server.service",
                Some("redis-server.service"),
            ),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/api.service",
                Some("api.service"),
            ),
            ("/system.slice/run-r1b2c3.scope", Some("run-r1b2c3.scope")),
            ("/system.slice/app.service/worker", Some("app.service")),
            ("/user.slice/user-0.slice/session-3.scope", None),
            ("/init.scope", None),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-1a2b.scope",
                None,
            ),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.scope",
                None,
            ),
            (&format!("/system.slice/docker-{id}.scope"), None),
            ("/", None),
            ("", None),
        ] {
            assert_eq!(unit(path).as_deref(), want, "{path}");
        }
    }
}

mod printable_tests {
    use super::super::printable;

    #[test]
    fn control_characters_and_direction_overrides_are_shown_escaped() {
        assert_eq!(printable("python3 app.py"), "python3 app.py");
        assert_eq!(
            printable("x\u{1b}]0;pwned\u{7}\u{1b}[2J"),
            "x\\x1b]0;pwned\\x07\\x1b[2J"
        );
        assert_eq!(printable("a\u{9b}31m\u{7f}"), "a\\x9b31m\\x7f");
        assert_eq!(printable("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(printable("naïve 日本"), "naïve 日本");
    }
}
