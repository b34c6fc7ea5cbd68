use super::*;

fn cell(q: &[u8]) -> Node {
    Node::Cell(CellAddr::now(
        "t".into(),
        b"r".to_vec().into(),
        "f".into(),
        q.to_vec(),
    ))
}

#[test]
fn inode_numbers_are_stable_and_distinct() {
    assert_eq!(Node::Root.natural_ino(), ROOT_INO);
    assert_eq!(cell(b"a").natural_ino(), cell(b"a").natural_ino());
    assert_ne!(cell(b"a").natural_ino(), cell(b"b").natural_ino());
    // Length prefixes keep ("ab","c") and ("a","bc") apart.
    let a = Node::Family(FamilyAddr {
        table: "t".into(),
        view: View::Now,
        row: b"ab".to_vec().into(),
        family: "c".into(),
    });
    let b = Node::Family(FamilyAddr {
        table: "t".into(),
        view: View::Now,
        row: b"a".to_vec().into(),
        family: "bc".into(),
    });
    assert_ne!(a.natural_ino(), b.natural_ino());
    let at = Node::Row {
        table: "t".into(),
        view: View::At(5),
        row: b"r".to_vec().into(),
    };
    let now = Node::Row {
        table: "t".into(),
        view: View::Now,
        row: b"r".to_vec().into(),
    };
    assert_ne!(at.natural_ino(), now.natural_ino());
    assert!(cell(b"x").natural_ino() > ROOT_INO);
    // A row's number, built with or without its node: the same, and the
    // hash of the encoding the kernel has been told numbers by.
    assert_eq!(Node::row_ino("t", View::Now, b"r"), now.natural_ino());
    assert_eq!(Node::row_ino("t", View::At(5), b"r"), at.natural_ino());
    let mut encoded = vec![10u8, 1, 0, 0, 0, b't', 0, 1, 0, 0, 0, b'r'];
    assert_eq!(now.natural_ino(), seahash::hash(&encoded));
    encoded.splice(6..7, [[1u8].as_slice(), &5u64.to_le_bytes()].concat());
    assert_eq!(at.natural_ino(), seahash::hash(&encoded));
}

#[test]
fn views_are_read_only() {
    assert!(!cell(b"a").read_only());
    let at = Node::Cell(CellAddr {
        table: "t".into(),
        view: View::At(1),
        row: b"r".to_vec().into(),
        family: "f".into(),
        qualifier: b"q".to_vec(),
    });
    assert!(at.read_only());
    assert!(Node::Status(StatusFile::Stats).read_only());
    assert!(!Node::Mutate("t".into()).read_only());
}

#[test]
fn display_escapes_keys() {
    assert_eq!(cell(b"a/b").to_string(), "/t/r/f/a%2Fb");
    assert!(!cell(b"a").is_dir());
    assert!(Node::Table("t".into()).is_dir());
    assert_eq!(StatusFile::from_name(b"stats"), Some(StatusFile::Stats));
}

#[test]
fn data_nodes_encode_field_by_field() {
    // The inode numbers of rows, families, cells and versions hash exactly
    // these bytes: tag, table, view, row, then family, qualifier, timestamp.
    fn put(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    let mut want = vec![15];
    put(&mut want, b"t");
    want.push(1);
    want.extend_from_slice(&7u64.to_le_bytes());
    put(&mut want, b"r");
    put(&mut want, b"f");
    put(&mut want, b"q");
    want.extend_from_slice(&9u64.to_le_bytes());
    let v = Node::Version {
        cell: CellAddr {
            table: "t".into(),
            view: View::At(7),
            row: b"r".to_vec().into(),
            family: "f".into(),
            qualifier: b"q".to_vec(),
        },
        ts: 9,
    };
    let mut got = Vec::new();
    v.encode(&mut got);
    assert_eq!(got, want);
    assert_eq!(v.to_string(), "/t/.at/7/r/f/.versions/q/0000000000000009");
    let mut want = vec![10];
    put(&mut want, b"t");
    want.push(0);
    put(&mut want, b"r");
    let row = Node::Row {
        table: "t".into(),
        view: View::Now,
        row: b"r".to_vec().into(),
    };
    let mut got = Vec::new();
    row.encode(&mut got);
    assert_eq!(got, want);
    assert_eq!(row.to_string(), "/t/r");
}
