use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use super::*;
use crate::{Error, LockHolder, LockMode, NodeSpec, Sequencer};
use LockMode::{Exclusive, Shared};

/// A cell holding "/l" (whose creation took lock generation 1).
fn with_file(delay_ms: u64) -> (tempfile::TempDir, Arc<LocalCell>) {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    cell.create(
        &root(),
        "/l",
        &NodeSpec::file(0o666).lock_delay(Duration::from_millis(delay_ms)),
    )
    .unwrap();
    (dir, cell)
}

fn never() -> bool {
    false
}

#[test]
fn exclusive_excludes_shared_shares() {
    let (_d, cell) = with_file(300);
    let r = root();
    cell.try_lock(&r, 1, "/l".into(), Shared).unwrap();
    cell.try_lock(&r, 2, "/l".into(), Shared).unwrap();
    assert!(matches!(
        cell.try_lock(&r, 3, "/l".into(), Exclusive),
        Err(Error::WouldBlock)
    ));
    // Not the sole reader: no upgrade.
    assert!(matches!(
        cell.try_lock(&r, 1, "/l".into(), Exclusive),
        Err(Error::WouldBlock)
    ));
    assert!(cell.unlock(2, "/l".into()).unwrap());
    assert!(
        !cell.unlock(2, "/l".into()).unwrap(),
        "unlock twice is a no-op"
    );
    // The sole reader upgrades, then the lock excludes everyone.
    let g = cell.try_lock(&r, 1, "/l".into(), Exclusive).unwrap();
    assert_eq!(g.generation, 2);
    assert_eq!(
        cell.holders("/l".into()).unwrap(),
        vec![LockHolder {
            owner: 1,
            mode: Exclusive
        }]
    );
    assert!(matches!(
        cell.try_lock(&r, 2, "/l".into(), Shared),
        Err(Error::WouldBlock)
    ));
    // Asking again for the held mode is granted without a new generation.
    assert_eq!(
        cell.try_lock(&r, 1, "/l".into(), Exclusive)
            .unwrap()
            .generation,
        2
    );
    // Downgrade lets readers in.
    cell.try_lock(&r, 1, "/l".into(), Shared).unwrap();
    cell.try_lock(&r, 2, "/l".into(), Shared).unwrap();
    assert_eq!(cell.holders("/l".into()).unwrap().len(), 2);
}

#[test]
fn lock_wait_times_out_near_the_deadline() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    let start = Instant::now();
    let res = cell.lock_wait(
        &root(),
        2,
        "/l".into(),
        Shared,
        Some(start + Duration::from_millis(200)),
        &never,
    );
    let took = start.elapsed();
    assert!(matches!(res, Err(Error::TimedOut)));
    // Not sooner than the deadline (ignoring it would hang, not pass).
    assert!(took >= Duration::from_millis(195), "{took:?}");
    assert_eq!(cell.holders("/l".into()).unwrap().len(), 1);
}

#[test]
fn lock_wait_is_granted_when_the_holder_unlocks() {
    // A minute of lock-delay, so that one applied by mistake cannot pass
    // for a slow grant on a loaded machine.
    let (_d, cell) = with_file(60_000);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    let c = cell.clone();
    let waiter =
        thread::spawn(move || c.lock_wait(&root(), 2, "/l".into(), Exclusive, None, &never));
    wait_for_waiters(&cell, 1);
    let start = Instant::now();
    cell.unlock(1, "/l".into()).unwrap();
    let g = waiter.join().unwrap().unwrap();
    // Orderly unlock: no lock-delay.
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(g.generation, 3);
}

#[test]
fn cancelled_waiter_is_never_granted() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    // The waiter is killed and the lock freed at the same moment: whichever
    // the waiter notices first, it must not end up holding the lock.
    for round in 0..20 {
        let dead = Arc::new(AtomicBool::new(false));
        let (c, d) = (cell.clone(), dead.clone());
        let waiter = thread::spawn(move || {
            c.lock_wait(&root(), 100 + round, "/l".into(), Exclusive, None, &|| {
                d.load(Ordering::SeqCst)
            })
        });
        // Deliberately varied spacing (not a wait for an event): the kill
        // lands before, while and after the waiter enters the queue.
        thread::sleep(Duration::from_millis(5 + round % 3 * 20));
        dead.store(true, Ordering::SeqCst);
        cell.unlock(1, "/l".into()).unwrap();
        let res = waiter.join().unwrap();
        assert!(
            matches!(res, Err(Error::Interrupted)),
            "round {round}: {res:?}"
        );
        assert!(cell.holders("/l".into()).unwrap().is_empty());
        assert!(cell.sequencer(100 + round, "/l".into()).is_none());
        // The lock is free at once (a cancelled waiter leaves no delay).
        cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    }
}

#[test]
fn waiter_killed_at_the_moment_of_grant_is_not_granted() {
    let (_d, cell) = with_file(300);
    // The closure turns true on its second call: after the entry check, just
    // as the free lock would be granted. That last look must refuse it.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let res = cell.lock_wait(&root(), 7, "/l".into(), Exclusive, None, &|| {
        calls.fetch_add(1, Ordering::SeqCst) >= 1
    });
    assert!(matches!(res, Err(Error::Interrupted)), "{res:?}");
    assert!(cell.holders("/l".into()).unwrap().is_empty());
    assert_eq!(cell.stat(&root(), "/l".into()).unwrap().lock_generation, 1);
    cell.try_lock(&root(), 8, "/l".into(), Exclusive).unwrap();
}

#[test]
fn cancellation_is_noticed_within_the_poll_interval() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    let dead = Arc::new(AtomicBool::new(false));
    let (c, d) = (cell.clone(), dead.clone());
    let waiter = thread::spawn(move || {
        let r = c.lock_wait(&root(), 2, "/l".into(), Shared, None, &|| {
            d.load(Ordering::SeqCst)
        });
        (r, Instant::now())
    });
    wait_for_waiters(&cell, 1);
    let killed = Instant::now();
    dead.store(true, Ordering::SeqCst);
    let (res, noticed) = waiter.join().unwrap();
    assert!(matches!(res, Err(Error::Interrupted)));
    // Polled every 50 ms; the holder never lets go, so only noticing the
    // cancellation ends the wait (the bound is for a loaded machine).
    assert!(noticed - killed < Duration::from_secs(30));
    // The holder keeps its lock; the dead waiter left the queue.
    cell.unlock(1, "/l".into()).unwrap();
    cell.try_lock(&root(), 3, "/l".into(), Exclusive).unwrap();
}

#[test]
fn dead_holder_lock_delay_is_honoured() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    let died = Instant::now();
    assert_eq!(cell.release_owner_dead(1), 1);
    assert!(matches!(
        cell.try_lock(&root(), 2, "/l".into(), Shared),
        Err(Error::WouldBlock)
    ));
    let g = cell
        .lock_wait(
            &root(),
            2,
            "/l".into(),
            Exclusive,
            Some(died + Duration::from_secs(30)),
            &never,
        )
        .unwrap();
    let waited = died.elapsed();
    assert!(waited >= Duration::from_millis(295), "{waited:?}");
    assert_eq!(g.generation, 3);
    // An orderly unlock frees it at once.
    cell.unlock(2, "/l".into()).unwrap();
    cell.try_lock(&root(), 3, "/l".into(), Exclusive).unwrap();
}

#[test]
fn writer_is_not_starved_by_readers() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Shared).unwrap();
    let c = cell.clone();
    let writer =
        thread::spawn(move || c.lock_wait(&root(), 2, "/l".into(), Exclusive, None, &never));
    wait_for_waiters(&cell, 1);
    // A new reader is compatible with the holder but must queue behind the writer.
    assert!(matches!(
        cell.try_lock(&root(), 3, "/l".into(), Shared),
        Err(Error::WouldBlock)
    ));
    let c = cell.clone();
    let reader = thread::spawn(move || c.lock_wait(&root(), 3, "/l".into(), Shared, None, &never));
    wait_for_waiters(&cell, 2);
    cell.unlock(1, "/l".into()).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(
        cell.holders("/l".into()).unwrap(),
        vec![LockHolder {
            owner: 2,
            mode: Exclusive
        }]
    );
    cell.unlock(2, "/l".into()).unwrap();
    assert_eq!(reader.join().unwrap().unwrap().mode, Shared);
}

#[test]
fn generations_grow_survive_reopen_and_fence_stale_sequencers() {
    let dir = tempfile::tempdir().unwrap();
    let stale: Sequencer;
    {
        let cell = open(dir.path());
        cell.create(&root(), "/master", &NodeSpec::file(0o644))
            .unwrap();
        let g1 = cell
            .try_lock(&root(), 1, "/master".into(), Exclusive)
            .unwrap();
        // Creation took generation 1; every writer grant takes the next.
        assert_eq!(g1.sequencer.to_string(), "/master:exclusive:2");
        assert!(cell.check_sequencer(&g1.sequencer));
        assert_eq!(
            cell.sequencer(1, "/master".into()),
            Some(g1.sequencer.clone())
        );
        cell.unlock(1, "/master".into()).unwrap();
        assert!(!cell.check_sequencer(&g1.sequencer), "released");
        let g2 = cell
            .try_lock(&root(), 2, "/master".into(), Exclusive)
            .unwrap();
        assert_eq!(g2.generation, 3);
        assert!(
            !cell.check_sequencer(&g1.sequencer),
            "reacquired by another"
        );
        assert!(cell.check_sequencer(&g2.sequencer));
        // Readers share the current generation.
        cell.unlock(2, "/master".into()).unwrap();
        let s = cell.try_lock(&root(), 3, "/master".into(), Shared).unwrap();
        assert_eq!(s.sequencer.to_string(), "/master:shared:3");
        assert!(cell.check_sequencer(&s.sequencer));
        assert!(!cell.check_sequencer(&g2.sequencer), "wrong mode");
        stale = s.sequencer;
    }
    let cell = open(dir.path());
    assert_eq!(
        cell.stat(&root(), "/master".into())
            .unwrap()
            .lock_generation,
        3
    );
    // Nobody holds anything after a restart.
    assert!(!cell.check_sequencer(&stale));
    let g3 = cell
        .try_lock(&root(), 9, "/master".into(), Exclusive)
        .unwrap();
    assert_eq!(g3.generation, 4);
    let parsed: Sequencer = g3.sequencer.to_string().parse().unwrap();
    assert!(cell.check_sequencer(&parsed));
    cell.rename(&root(), "/master", "/m2").unwrap();
    assert!(
        !cell.check_sequencer(&parsed),
        "the path no longer names it"
    );
    // A node recreated under the old path never repeats a generation, so
    // old sequencers stay stale whatever the new node goes through.
    cell.unlock(9, "/m2".into()).unwrap();
    cell.unlink(&root(), "/m2").unwrap();
    let st = cell
        .create(&root(), "/master", &NodeSpec::file(0o644))
        .unwrap();
    assert!(st.lock_generation > 4);
    let s = cell.try_lock(&root(), 1, "/master".into(), Shared).unwrap();
    assert!(s.generation > 4);
    assert!(!cell.check_sequencer(&stale));
    assert!(!cell.check_sequencer(&parsed));
}

#[test]
fn waiter_on_removed_node_gets_not_found() {
    let (_d, cell) = with_file(300);
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    let c = cell.clone();
    let waiter = thread::spawn(move || c.lock_wait(&root(), 2, "/l".into(), Shared, None, &never));
    wait_for_waiters(&cell, 1);
    cell.unlink(&root(), "/l").unwrap();
    assert!(matches!(waiter.join().unwrap(), Err(Error::NotFound(_))));
}

#[test]
fn release_owner_dead_covers_every_lock_of_the_owner() {
    let (_d, cell) = with_file(0);
    cell.create(&root(), "/m", &NodeSpec::file(0o644)).unwrap();
    cell.try_lock(&root(), 1, "/l".into(), Exclusive).unwrap();
    cell.try_lock(&root(), 1, "/m".into(), Shared).unwrap();
    cell.try_lock(&root(), 2, "/m".into(), Shared).unwrap();
    assert_eq!(cell.release_owner_dead(1), 2);
    assert_eq!(cell.release_owner_dead(1), 0);
    // /l has no lock-delay; /m's default is 300 ms but owner 2 still reads.
    cell.try_lock(&root(), 3, "/l".into(), Exclusive).unwrap();
    assert_eq!(cell.holders("/m".into()).unwrap().len(), 1);
    let status = cell.status().join("\n");
    assert!(
        // /l created 1, /m created 2, owner 1's grant 3, owner 3's grant 4.
        status.contains("lock /l generation 4 holders [3:exclusive]"),
        "{status}"
    );
}
