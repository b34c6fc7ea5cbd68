#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The public gRPC API as an attacker uses it: as uid 65534's identity (a
//! bearer token of the daemon's `grpc_tokens` file), without a token from
//! loopback, and as a client that costs the daemon what it can. Each
//! identity gets exactly what the same user gets through the mount.

use grpc::admin_v2::{self as a, bigtable_table_admin_client::BigtableTableAdminClient};
use grpc::v2::{self, bigtable_client::BigtableClient, row_filter::Filter as F};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use tests::Mount;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Code;

const NOBODY: &str = "nobody-token-0123456789";
const ROOT: &str = "root-token-0123456789ab";

/// A tokens file as the daemon wants it: the daemon user's, mode 0600.
struct TokenFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TokenFile {
    fn new(mode: u32) -> TokenFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            format!("# test identities\n{NOBODY} 65534:65534\n{ROOT} 0:0\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        TokenFile { _dir: dir, path }
    }
    fn option(&self) -> String {
        format!("grpc_tokens={}", self.path.display())
    }
}

/// Sends `authorization: Bearer TOKEN` on every call (or nothing).
#[derive(Clone)]
struct Bearer(Option<&'static str>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = self.0 {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(r)
    }
}

/// A client of the daemon's API as one identity.
struct Api {
    rt: tokio::runtime::Runtime,
    data: BigtableClient<InterceptedService<Channel, Bearer>>,
    admin: BigtableTableAdminClient<InterceptedService<Channel, Bearer>>,
}

fn tname(t: &str) -> String {
    format!("projects/p/instances/{}/tables/{t}", grpc::DEFAULT_INSTANCE)
}

fn parent() -> String {
    format!("projects/p/instances/{}", grpc::DEFAULT_INSTANCE)
}

/// (row, family, qualifier, value) of every cell a ReadRows returned.
type Cells = BTreeSet<(String, String, String, String)>;

impl Api {
    fn new(addr: &str, token: Option<&'static str>) -> Api {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let ch = rt
            .block_on(
                Channel::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect(),
            )
            .unwrap();
        Api {
            data: BigtableClient::with_interceptor(ch.clone(), Bearer(token))
                .max_decoding_message_size(64 << 20),
            admin: BigtableTableAdminClient::with_interceptor(ch, Bearer(token)),
            rt,
        }
    }

    fn read(&mut self, t: &str, filter: Option<F>) -> Result<Cells, tonic::Status> {
        let req = v2::ReadRowsRequest {
            table_name: tname(t),
            filter: filter.map(|f| v2::RowFilter { filter: Some(f) }),
            ..Default::default()
        };
        let data = &mut self.data;
        self.rt.block_on(async {
            let mut s = data.read_rows(req).await?.into_inner();
            let mut out = Cells::new();
            let (mut row, mut fam, mut qual) = (String::new(), String::new(), String::new());
            while let Some(r) = s.message().await? {
                for c in r.chunks {
                    if !c.row_key.is_empty() {
                        row = String::from_utf8_lossy(&c.row_key).into_owned();
                    }
                    if let Some(f) = c.family_name {
                        fam = f;
                    }
                    if let Some(q) = c.qualifier {
                        qual = String::from_utf8_lossy(&q).into_owned();
                    }
                    let v = String::from_utf8_lossy(&c.value).into_owned();
                    out.insert((row.clone(), fam.clone(), qual.clone(), v));
                }
            }
            Ok(out)
        })
    }

    fn set(
        &mut self,
        t: &str,
        row: &str,
        family: &str,
        q: &str,
        v: &str,
    ) -> Result<(), tonic::Status> {
        let req = v2::MutateRowRequest {
            table_name: tname(t),
            row_key: row.as_bytes().to_vec(),
            mutations: vec![set(family, q, v)],
            ..Default::default()
        };
        self.rt.block_on(self.data.mutate_row(req)).map(|_| ())
    }

    fn tables(&mut self) -> Result<Vec<String>, tonic::Status> {
        let req = a::ListTablesRequest {
            parent: parent(),
            ..Default::default()
        };
        let r = self.rt.block_on(self.admin.list_tables(req))?.into_inner();
        Ok(r.tables
            .into_iter()
            .map(|t| t.name.rsplit('/').next().unwrap_or_default().to_string())
            .collect())
    }
}

fn set(family: &str, q: &str, v: &str) -> v2::Mutation {
    v2::Mutation {
        mutation: Some(v2::mutation::Mutation::SetCell(v2::mutation::SetCell {
            family_name: family.into(),
            column_qualifier: q.as_bytes().to_vec(),
            timestamp_micros: -1,
            value: v.as_bytes().to_vec(),
        })),
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(s) => s.code(),
    }
}

fn cells(list: &[(&str, &str, &str, &str)]) -> Cells {
    list.iter()
        .map(|(r, f, q, v)| (r.to_string(), f.to_string(), q.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_api_grants_uid_65534_exactly_what_the_mount_grants_it() {
    let tokens = TokenFile::new(0o600);
    let m = Mount::with_options(&["grpc=127.0.0.1:0", &tokens.option()]);
    let addr = m.grpc_addr();
    m.table("t", "pub mode=0755\npriv mode=0700\nshared mode=0777\n");
    m.mutate(
        "t",
        b"set r pub:a hello\nset r priv:b secret\nset r shared:c open\nset s priv:only x\n",
    );
    m.table("closed", "f\n");
    m.mutate("closed", b"set k f:q root-only\n");
    m.ok("chmod 0700 closed");
    let nobody_sh = |s: &str| m.sh_as_nobody(s);
    let mut nobody = Api::new(&addr, Some(NOBODY));
    let mut root = Api::new(&addr, Some(ROOT));

    // Tables: the 0700 one is neither read nor listed nor described.
    assert!(!nobody_sh("ls closed").status.success());
    assert_eq!(code(nobody.read("closed", None)), Code::PermissionDenied);
    assert!(!nobody_sh("cat closed/.schema").status.success());
    let get = a::GetTableRequest {
        name: tname("closed"),
        ..Default::default()
    };
    assert_eq!(
        code(nobody.rt.block_on(nobody.admin.get_table(get.clone()))),
        Code::PermissionDenied
    );
    let sample = v2::SampleRowKeysRequest {
        table_name: tname("closed"),
        ..Default::default()
    };
    assert_eq!(
        code(nobody.rt.block_on(nobody.data.sample_row_keys(sample))),
        Code::PermissionDenied
    );
    let listed = nobody.tables().unwrap();
    assert!(
        listed.contains(&"t".to_string()) && !listed.contains(&"closed".to_string()),
        "{listed:?}"
    );
    assert!(root.tables().unwrap().contains(&"closed".to_string()));
    assert!(root.rt.block_on(root.admin.get_table(get)).is_ok());

    // Families: what `.scan` shows nobody, and nothing of priv.
    let scan = nobody_sh("cat t/.scan/all");
    let scan = String::from_utf8_lossy(&scan.stdout);
    assert!(
        scan.contains("pub:a") && scan.contains("shared:c") && !scan.contains("secret"),
        "{scan}"
    );
    let readable = cells(&[("r", "pub", "a", "hello"), ("r", "shared", "c", "open")]);
    assert_eq!(nobody.read("t", None).unwrap(), readable);
    assert_eq!(root.read("t", None).unwrap().len(), 4);

    // Filters see only readable families: a condition on priv, a qualifier
    // or value regex that only priv's cells match, answer nothing.
    let on_priv = || {
        F::Condition(Box::new(v2::row_filter::Condition {
            predicate_filter: Some(Box::new(v2::RowFilter {
                filter: Some(F::FamilyNameRegexFilter("priv".into())),
            })),
            true_filter: Some(Box::new(v2::RowFilter {
                filter: Some(F::PassAllFilter(true)),
            })),
            false_filter: None,
        }))
    };
    assert_eq!(nobody.read("t", Some(on_priv())).unwrap(), Cells::new());
    assert!(!root.read("t", Some(on_priv())).unwrap().is_empty());
    for (f, root_sees) in [
        (F::ColumnQualifierRegexFilter(b"b".to_vec()), 1),
        (F::ValueRegexFilter(b"sec.*".to_vec()), 1),
        (F::FamilyNameRegexFilter("priv".into()), 2),
    ] {
        assert_eq!(nobody.read("t", Some(f.clone())).unwrap(), Cells::new());
        assert_eq!(root.read("t", Some(f)).unwrap().len(), root_sees);
    }
    let cam = |predicate: F| v2::CheckAndMutateRowRequest {
        table_name: tname("t"),
        row_key: b"r".to_vec(),
        predicate_filter: Some(v2::RowFilter {
            filter: Some(predicate),
        }),
        true_mutations: vec![set("shared", "seen", "yes")],
        false_mutations: vec![set("shared", "seen", "no")],
        ..Default::default()
    };

    // Writes: `.mutate` needs a writable table, as the API does.
    assert!(!nobody_sh("printf 'set r shared:z 1\\n' > t/.mutate")
        .status
        .success());
    assert_eq!(
        code(nobody.set("t", "r", "shared", "z", "1")),
        Code::PermissionDenied
    );
    m.ok("chmod 0777 t");
    assert!(nobody_sh("printf 'set r shared:z 1\\n' > t/.mutate")
        .status
        .success());
    nobody.set("t", "r", "shared", "z", "2").unwrap();
    assert!(!nobody_sh("printf 'set r priv:z 1\\n' > t/.mutate")
        .status
        .success());
    assert_eq!(
        code(nobody.set("t", "r", "priv", "z", "1")),
        Code::PermissionDenied
    );
    assert!(!nobody_sh("echo x > t/r/pub/a").status.success());
    assert_eq!(
        code(nobody.set("t", "r", "pub", "a", "x")),
        Code::PermissionDenied
    );
    let del_row = v2::MutateRowRequest {
        table_name: tname("t"),
        row_key: b"r".to_vec(),
        mutations: vec![v2::Mutation {
            mutation: Some(v2::mutation::Mutation::DeleteFromRow(
                v2::mutation::DeleteFromRow {},
            )),
        }],
        ..Default::default()
    };
    assert_eq!(
        code(nobody.rt.block_on(nobody.data.mutate_row(del_row))),
        Code::PermissionDenied
    );
    let batch = v2::MutateRowsRequest {
        table_name: tname("t"),
        entries: ["shared", "priv", "pub"]
            .iter()
            .map(|f| v2::mutate_rows_request::Entry {
                row_key: b"b".to_vec(),
                mutations: vec![set(f, "q", "v")],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut s = nobody
        .rt
        .block_on(nobody.data.mutate_rows(batch))
        .unwrap()
        .into_inner();
    let resp = nobody.rt.block_on(s.message()).unwrap().unwrap();
    let codes: Vec<i32> = resp
        .entries
        .iter()
        .map(|e| e.status.as_ref().unwrap().code)
        .collect();
    assert_eq!(
        codes,
        vec![
            Code::Ok as i32,
            Code::PermissionDenied as i32,
            Code::PermissionDenied as i32
        ]
    );
    // A check-and-mutate cannot see priv either.
    let matched = nobody
        .rt
        .block_on(
            nobody
                .data
                .check_and_mutate_row(cam(F::FamilyNameRegexFilter("priv".into()))),
        )
        .unwrap()
        .into_inner()
        .predicate_matched;
    assert!(!matched);
    assert_eq!(m.ok("cat t/r/shared/seen"), "no");
    let matched = root
        .rt
        .block_on(
            root.data
                .check_and_mutate_row(cam(F::FamilyNameRegexFilter("priv".into()))),
        )
        .unwrap()
        .into_inner()
        .predicate_matched;
    assert!(matched);
    let rmw = |f: &str| v2::ReadModifyWriteRowRequest {
        table_name: tname("t"),
        row_key: b"r".to_vec(),
        rules: vec![v2::ReadModifyWriteRule {
            family_name: f.into(),
            column_qualifier: b"c".to_vec(),
            rule: Some(v2::read_modify_write_rule::Rule::AppendValue(b"+".to_vec())),
        }],
        ..Default::default()
    };
    assert!(nobody
        .rt
        .block_on(nobody.data.read_modify_write_row(rmw("shared")))
        .is_ok());
    assert_eq!(
        code(
            nobody
                .rt
                .block_on(nobody.data.read_modify_write_row(rmw("priv")))
        ),
        Code::PermissionDenied
    );

    // Admin calls: what mkdir, rm -r and writing `.schema` take.
    assert!(!nobody_sh("mkdir newtable").status.success());
    let create = a::CreateTableRequest {
        parent: parent(),
        table_id: "newtable".into(),
        ..Default::default()
    };
    assert_eq!(
        code(nobody.rt.block_on(nobody.admin.create_table(create))),
        Code::PermissionDenied
    );
    assert!(!nobody_sh("rmdir t").status.success());
    let delete = |t: &str| a::DeleteTableRequest { name: tname(t) };
    assert_eq!(
        code(nobody.rt.block_on(nobody.admin.delete_table(delete("t")))),
        Code::PermissionDenied
    );
    let drop = a::DropRowRangeRequest {
        name: tname("t"),
        target: Some(a::drop_row_range_request::Target::DeleteAllDataFromTable(
            true,
        )),
    };
    assert_eq!(
        code(nobody.rt.block_on(nobody.admin.drop_row_range(drop))),
        Code::PermissionDenied
    );
    use a::modify_column_families_request::{modification::Mod, Modification};
    let modify = |name: &str, m: Mod| a::ModifyColumnFamiliesRequest {
        name: tname("t"),
        modifications: vec![Modification {
            id: name.into(),
            r#mod: Some(m),
            ..Default::default()
        }],
        ..Default::default()
    };
    let short_gc = a::ColumnFamily {
        gc_rule: Some(a::GcRule {
            rule: Some(a::gc_rule::Rule::MaxAge(prost_types::Duration {
                seconds: 0,
                nanos: 1_000_000,
            })),
        }),
        value_type: None,
    };
    // Wiping priv with a 1 ms max_age, or dropping it, needs write on priv.
    assert_eq!(
        code(
            nobody.rt.block_on(
                nobody
                    .admin
                    .modify_column_families(modify("priv", Mod::Update(short_gc)))
            )
        ),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            nobody.rt.block_on(
                nobody
                    .admin
                    .modify_column_families(modify("priv", Mod::Drop(true)))
            )
        ),
        Code::PermissionDenied
    );
    // The table is 0777: like a `.schema` write, a new family is allowed,
    // and it is nobody's.
    nobody
        .rt
        .block_on(
            nobody
                .admin
                .modify_column_families(modify("mine", Mod::Create(Default::default()))),
        )
        .unwrap();
    let schema = m.ok("cat t/.schema");
    assert!(
        schema
            .lines()
            .any(|l| l.starts_with("mine ") && l.contains("owner=nobody")),
        "{schema}"
    );
    assert_eq!(m.ok("cat t/r/priv/b"), "secret");

    // Without a token, or with a wrong one: nothing, not even from loopback.
    for token in [None, Some("not-a-known-token-at-all")] {
        let mut stranger = Api::new(&addr, token);
        assert_eq!(code(stranger.read("closed", None)), Code::Unauthenticated);
        assert_eq!(
            code(
                stranger
                    .rt
                    .block_on(stranger.admin.delete_table(delete("closed")))
            ),
            Code::Unauthenticated
        );
        assert_eq!(code(stranger.tables()), Code::Unauthenticated);
    }
    // The daemon still serves, and root's table is whole.
    assert_eq!(
        root.read("closed", None).unwrap(),
        cells(&[("k", "f", "q", "root-only")])
    );
    assert_eq!(m.ok("cat closed/k/f/q"), "root-only");
}

/// Runs the daemon with `opts` and expects it to refuse them.
fn refused(opts: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (data, mnt) = (dir.path().join("data"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(tests::bin("bigtable-mountd"))
        .arg(&data)
        .arg(&mnt)
        .args(["-f", "-o", opts])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the daemon took -o {opts}");
    assert!(tests::mount_type(&mnt).is_none());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_daemon_refuses_loopback_trust_with_allow_other_and_exposed_token_files() {
    let why = refused("grpc=127.0.0.1:0,grpc_trust_loopback,allow_other");
    assert!(why.contains("allow_other"), "{why}");
    let why = refused("grpc=127.0.0.1:0");
    assert!(why.contains("grpc_tokens"), "{why}");
    for mode in [0o644, 0o640, 0o604] {
        let t = TokenFile::new(mode);
        let why = refused(&format!("grpc=127.0.0.1:0,{}", t.option()));
        assert!(why.contains("chmod 600"), "{why}");
    }
}

/// CPU seconds the process has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

fn entry(row: &str, family: &str) -> v2::mutate_rows_request::Entry {
    v2::mutate_rows_request::Entry {
        row_key: row.as_bytes().to_vec(),
        mutations: vec![set(family, "q", "v")],
        ..Default::default()
    }
}

#[test]
fn forty_streams_that_never_read_leave_the_api_serving() {
    let tokens = TokenFile::new(0o600);
    let m = Mount::with_options(&["grpc=127.0.0.1:0", &tokens.option()]);
    let addr = m.grpc_addr();
    m.table("big", "f\n");
    m.table("small", "f\n");
    m.mutate("small", b"set k f:q v\n");
    let mut root = Api::new(&addr, Some(ROOT));
    // 12 MiB: more than a stream's buffers hold, so a scan that is not
    // read stops part way.
    let value = "x".repeat(64 * 1024);
    for part in 0..4 {
        let req = v2::MutateRowsRequest {
            table_name: tname("big"),
            entries: (0..48)
                .map(|i| v2::mutate_rows_request::Entry {
                    row_key: format!("row{part}-{i:03}").into_bytes(),
                    mutations: vec![set("f", "q", &value)],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut s = root
            .rt
            .block_on(root.data.mutate_rows(req))
            .unwrap()
            .into_inner();
        root.rt.block_on(s.message()).unwrap().unwrap();
    }
    // 40 streams over 4 connections, never read.
    let mut idle = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut c = Api::new(&addr, Some(ROOT));
        for _ in 0..10 {
            let req = v2::ReadRowsRequest {
                table_name: tname("big"),
                ..Default::default()
            };
            let data = &mut c.data;
            let opened = c.rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(60), data.read_rows(req)).await
            });
            let opened = opened.unwrap_or_else(|_| {
                panic!(
                    "stream {} did not open in 60 s; log:\n{}",
                    idle.len(),
                    tests::tail(&m.log_text(), 20)
                )
            });
            idle.push(opened.unwrap().into_inner());
        }
        clients.push(c);
    }
    // Every other call still answers, again and again.
    for i in 0..20 {
        let done = root.rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(60), async {
                let req = v2::ReadRowsRequest {
                    table_name: tname("small"),
                    ..Default::default()
                };
                let mut s = root.data.read_rows(req).await?.into_inner();
                while s.message().await?.is_some() {}
                let req = v2::MutateRowRequest {
                    table_name: tname("small"),
                    row_key: format!("w{i}").into_bytes(),
                    mutations: vec![set("f", "q", "v")],
                    ..Default::default()
                };
                root.data.mutate_row(req).await?;
                Ok::<_, tonic::Status>(())
            })
            .await
        });
        assert!(
            matches!(done, Ok(Ok(()))),
            "call {i} with 40 idle streams: {done:?}; log:\n{}",
            tests::tail(&m.log_text(), 20)
        );
    }
    eprintln!(
        "daemon RSS with 40 idle streams: {} KiB",
        tests::rss_kib(m.pid())
    );
    drop(idle);
    drop(clients);
    assert_eq!(m.ok("cat small/w19/f/q"), "v");
}

#[test]
fn twenty_thousand_bad_entries_cost_linear_time() {
    let tokens = TokenFile::new(0o600);
    let m = Mount::with_options(&["grpc=127.0.0.1:0", &tokens.option()]);
    let addr = m.grpc_addr();
    m.table("t", "f\n");
    let mut root = Api::new(&addr, Some(ROOT));
    let mut entries: Vec<_> = (0..20_000)
        .map(|i| entry(&format!("bad{i}"), "nope"))
        .collect();
    entries.push(entry("good", "f"));
    let req = v2::MutateRowsRequest {
        table_name: tname("t"),
        entries,
        ..Default::default()
    };
    let before = cpu_seconds(m.pid());
    let mut s = root
        .rt
        .block_on(root.data.mutate_rows(req))
        .unwrap()
        .into_inner();
    let mut codes = Vec::new();
    while let Some(r) = root.rt.block_on(s.message()).unwrap() {
        codes.extend(r.entries.iter().map(|e| e.status.as_ref().unwrap().code));
    }
    let spent = cpu_seconds(m.pid()) - before;
    eprintln!("20,000 bad entries: {spent:.2} s of the daemon's CPU");
    assert_eq!(codes.len(), 20_001);
    assert!(codes[..20_000].iter().all(|&c| c == Code::NotFound as i32));
    assert_eq!(codes[20_000], Code::Ok as i32);
    // Re-validating the batch per bad entry took 22 s; one pass takes well
    // under one.
    assert!(spent < 8.0, "{spent} s of CPU for one MutateRows");
    assert_eq!(m.ok("cat t/good/f/q"), "v");
}

/// GET `path` from the console with `Host: host` (and a bearer token):
/// (status code, body).
fn http_get(addr: &str, path: &str, host: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// Characters XML 1.0 does not allow, even as references.
fn xml_forbidden(c: char) -> bool {
    (c.is_control() && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{FFFE}' || c == '\u{FFFF}'
}

#[test]
fn the_console_shows_a_0700_tables_keys_only_to_who_may_read_it() {
    let tokens = TokenFile::new(0o600);
    // merge=0: the master must not merge the small tablets back together.
    let m = Mount::with_options(&[
        "grpc=127.0.0.1:0",
        "http=127.0.0.1:0",
        "merge=0",
        &tokens.option(),
    ]);
    let (api, web) = (m.grpc_addr(), m.console_addr());
    let mut root = Api::new(&api, Some(ROOT));
    // Tablet boundaries at known keys: the status page lists every tablet's range.
    for (t, split) in [
        ("secret", &b"hidden-key-4711"[..]),
        ("open", &b"ctl\x01\x02\x1b-key"[..]),
    ] {
        let req = a::CreateTableRequest {
            parent: parent(),
            table_id: t.into(),
            table: Some(a::Table {
                column_families: [("f".to_string(), a::ColumnFamily::default())].into(),
                ..Default::default()
            }),
            initial_splits: vec![a::create_table_request::Split {
                key: split.to_vec(),
            }],
        };
        root.rt.block_on(root.admin.create_table(req)).unwrap();
        let row = String::from_utf8_lossy(split).into_owned();
        root.set(t, &row, "f", "q", "v").unwrap();
        root.read(t, None).unwrap();
    }
    m.ok("chmod 0700 secret");
    let host = web.clone();
    // Root's token sees both tables' keys.
    let (code, page) = http_get(&web, "/", &host, Some(ROOT));
    assert_eq!(code, 200);
    assert!(page.contains("hidden-key-4711"), "{page}");
    // Anonymous viewers (others) and uid 65534 see none of the 0700 table.
    for token in [None, Some(NOBODY)] {
        for path in ["/", "/keyviz", "/keyviz.svg", "/keyviz.json", "/metrics"] {
            let (code, body) = http_get(&web, path, &host, token);
            assert_eq!(code, 200, "{path}: {body}");
            assert!(
                !body.contains("hidden-key"),
                "{path} as {token:?} shows the key:\n{body}"
            );
        }
    }
    // A token that is not in the file is refused, not taken as anonymous.
    assert_eq!(
        http_get(&web, "/", &host, Some("no-such-token-at-all")).0,
        401
    );
    // Keys with control bytes: valid XML in the SVG, visible escapes on the page.
    let (_, page) = http_get(&web, "/", &host, None);
    assert!(page.contains("ctl\\x01\\x02\\x1b-key"), "{page}");
    for path in ["/", "/keyviz", "/keyviz.svg"] {
        let (_, body) = http_get(&web, path, &host, None);
        assert!(!body.chars().any(xml_forbidden), "{path}: {body:?}");
    }
}

#[test]
fn the_console_refuses_foreign_hosts_and_outlives_clients_that_never_read() {
    use std::io::Write;
    let m = Mount::with_options(&["http=127.0.0.1:0", "http_hosts=console.example.org"]);
    let web = m.console_addr();
    let port = web.rsplit(':').next().unwrap().to_string();
    // DNS rebinding: a page of evil.example.com whose name now points here.
    for host in ["evil.example.com", &format!("evil.example.com:{port}")] {
        assert_eq!(http_get(&web, "/", host, None).0, 421, "{host}");
    }
    for host in [
        web.clone(),
        format!("localhost:{port}"),
        "console.example.org".into(),
    ] {
        assert_eq!(http_get(&web, "/", &host, None).0, 200, "{host}");
    }
    let (_, metrics) = http_get(&web, "/metrics", &web, None);
    let counted: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("bigtable_refused_calls_total{port=\"console\",reason=\"host\"} ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no refusal counter:\n{metrics}"));
    assert!(counted >= 2.0, "{counted}");
    // Clients that never send a request and never read their answers.
    let mut idle = Vec::new();
    for i in 0..2 {
        let mut s = std::net::TcpStream::connect(&web).unwrap();
        if i == 1 {
            for _ in 0..64 {
                let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: {web}\r\n\r\n");
            }
        }
        idle.push(s);
    }
    for _ in 0..10 {
        let (code, body) = http_get(&web, "/metrics", &web, None);
        assert_eq!(code, 200, "{body}");
    }
    drop(idle);
}

/// A self-signed certificate for 127.0.0.1 and its key (mode `key_mode`).
fn certificate(dir: &std::path::Path, key_mode: u32) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is needed for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(key_mode)).unwrap();
    (cert, key)
}

#[test]
fn the_console_speaks_tls_with_a_certificate_and_refuses_an_exposed_key() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path(), 0o600);
    let m = Mount::with_options(&[
        "http=127.0.0.1:0",
        &format!("http_cert={}", cert.display()),
        &format!("http_key={}", key.display()),
    ]);
    let web = m.console_addr();
    assert!(m.log_text().contains(&format!("https://{web}/")));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "--cacert"])
        .arg(&cert)
        .arg(format!("https://{web}/"))
        .output()
        .expect("curl is needed for this test");
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && page.contains("bigtable-fs console"),
        "{page}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Plain HTTP gets no page.
    let plain = Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .arg(format!("http://{web}/"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("bigtable-fs console"));
    // A key others may read is refused, as ssh refuses one.
    let (cert, key) = certificate(dir.path(), 0o644);
    let why = refused(&format!(
        "http=127.0.0.1:0,http_cert={},http_key={}",
        cert.display(),
        key.display()
    ));
    assert!(why.contains("chmod 600"), "{why}");
}
