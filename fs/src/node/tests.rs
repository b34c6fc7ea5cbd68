use super::*;

fn cell(q: &[u8]) -> Node {
    Node::Cell {
        table: "t".into(),
        view: View::Now,
        row: b"r".to_vec(),
        family: "f".into(),
        qualifier: q.to_vec(),
    }
}

#[test]
fn inode_numbers_are_stable_and_distinct() {
    assert_eq!(Node::Root.ino(), ROOT_INO);
    assert_eq!(cell(b"a").ino(), cell(b"a").ino());
    assert_ne!(cell(b"a").ino(), cell(b"b").ino());
    // Length prefixes keep ("ab","c") and ("a","bc") apart.
    let a = Node::Family {
        table: "t".into(),
        view: View::Now,
        row: b"ab".to_vec(),
        family: "c".into(),
    };
    let b = Node::Family {
        table: "t".into(),
        view: View::Now,
        row: b"a".to_vec(),
        family: "bc".into(),
    };
    assert_ne!(a.ino(), b.ino());
    let at = Node::Row {
        table: "t".into(),
        view: View::At(5),
        row: b"r".to_vec(),
    };
    let now = Node::Row {
        table: "t".into(),
        view: View::Now,
        row: b"r".to_vec(),
    };
    assert_ne!(at.ino(), now.ino());
    assert!(cell(b"x").ino() > ROOT_INO);
}

#[test]
fn views_are_read_only() {
    assert!(!cell(b"a").read_only());
    let at = Node::Cell {
        table: "t".into(),
        view: View::At(1),
        row: b"r".to_vec(),
        family: "f".into(),
        qualifier: b"q".to_vec(),
    };
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
