use super::*;
use crate::{Event, LockMode, NodeSpec};

#[test]
fn every_kind_of_event_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let r = root();
    cell.create(&r, "/d", &NodeSpec::dir(0o755)).unwrap();
    let dir_ev = cell.subscribe(&r, "/d".into()).unwrap();
    let all = cell.watch_all();
    cell.create(&r, "/d/f", &NodeSpec::file(0o644)).unwrap();
    let file_ev = cell.subscribe(&r, "/d/f".into()).unwrap();
    cell.set_contents(&r, "/d/f".into(), b"v1").unwrap();
    cell.try_lock(&r, 1, "/d/f".into(), LockMode::Exclusive)
        .unwrap();
    cell.unlock(1, "/d/f".into()).unwrap();
    cell.rename(&r, "/d/f", "/d/g").unwrap();
    cell.set_contents(&r, "/d/g".into(), b"v2").unwrap();
    cell.unlink(&r, "/d/g").unwrap();
    assert_eq!(
        file_ev.try_iter().collect::<Vec<_>>(),
        vec![
            Event::ContentsChanged,
            Event::LockAcquired(LockMode::Exclusive),
            Event::LockReleased,
            Event::ContentsChanged,
            Event::Deleted,
        ]
    );
    // The channel closes after Deleted.
    assert!(file_ev.recv_timeout(Duration::from_millis(10)).is_err());
    assert_eq!(
        dir_ev.try_iter().collect::<Vec<_>>(),
        vec![
            Event::ChildAdded("f".into()),
            Event::ChildRemoved("f".into()),
            Event::ChildAdded("g".into()),
            Event::ChildRemoved("g".into()),
        ]
    );
    let watched: Vec<(String, Event)> = all.try_iter().map(|w| (w.path, w.event)).collect();
    assert_eq!(
        watched[0],
        ("/d".to_string(), Event::ChildAdded("f".into()))
    );
    assert!(watched.contains(&("/d/g".to_string(), Event::Deleted)));
}

#[test]
fn events_reach_a_blocked_reader_and_dropping_unsubscribes() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    cell.create(&root(), "/f", &NodeSpec::file(0o644)).unwrap();
    let rx = cell.subscribe(&root(), "/f".into()).unwrap();
    let c = cell.clone();
    let writer = std::thread::spawn(move || {
        // Deliberate spacing, not a wait for an event: the reader is most
        // likely blocked in recv by now, the case this test is about; if it
        // is not, the event is queued and the test still holds.
        std::thread::sleep(Duration::from_millis(30));
        c.set_contents(&root(), "/f".into(), b"x").unwrap();
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        Event::ContentsChanged
    );
    writer.join().unwrap();
    let subs = |c: &LocalCell| {
        c.status()
            .into_iter()
            .find(|l| l.starts_with("subscribers"))
            .unwrap()
    };
    assert_eq!(subs(&cell), "subscribers 1");
    drop(rx);
    cell.set_contents(&root(), "/f".into(), b"y").unwrap();
    assert_eq!(subs(&cell), "subscribers 0");
}
