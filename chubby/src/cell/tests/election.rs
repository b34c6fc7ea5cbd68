//! Leader election as the engine's master (and the shell example of docs/lock-directory.md)
//! does it: contenders wait for the writer lock; the leader works, then
//! either resigns or "dies".

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use super::*;
use crate::{Error, LockMode, NodeSpec};

#[test]
fn exactly_one_leader_at_a_time() {
    const ROUNDS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    cell.create(
        &root(),
        "/leader",
        &NodeSpec::file(0o644).lock_delay(Duration::from_millis(10)),
    )
    .unwrap();
    let first_gen = cell
        .stat(&root(), "/leader".into())
        .unwrap()
        .lock_generation;
    let leaders = Arc::new(AtomicUsize::new(0));
    let rounds = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let last_gen = Arc::new(Mutex::new(0u64));
    let mut threads = Vec::new();
    for id in 0..3u64 {
        let (cell, leaders, rounds, done, last_gen) = (
            cell.clone(),
            leaders.clone(),
            rounds.clone(),
            done.clone(),
            last_gen.clone(),
        );
        threads.push(thread::spawn(move || {
            let mut won = 0;
            loop {
                let d = done.clone();
                let g = match cell.lock_wait(
                    &root(),
                    id,
                    "/leader".into(),
                    LockMode::Exclusive,
                    None,
                    &move || d.load(Ordering::SeqCst),
                ) {
                    Ok(g) => g,
                    Err(Error::Interrupted) => return won,
                    Err(e) => panic!("contender {id}: {e}"),
                };
                assert_eq!(leaders.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                {
                    let mut last = last_gen.lock().unwrap();
                    assert!(g.generation > *last, "generation went backwards");
                    *last = g.generation;
                }
                assert!(cell.check_sequencer(&g.sequencer));
                cell.set_contents(&root(), "/leader".into(), format!("{id}").as_bytes())
                    .unwrap();
                // Deliberate: hold leadership for a moment so that the others
                // contend while a leader is in office.
                thread::sleep(Duration::from_millis(1));
                assert_eq!(
                    cell.read(&root(), "/leader".into()).unwrap().0,
                    format!("{id}").as_bytes()
                );
                leaders.fetch_sub(1, Ordering::SeqCst);
                won += 1;
                let n = rounds.fetch_add(1, Ordering::SeqCst) + 1;
                if n % 2 == 0 {
                    cell.unlock(id, "/leader".into()).unwrap();
                } else {
                    // Killed leader: lock-delay before the next one.
                    cell.release_owner_dead(id);
                }
                assert!(!cell.check_sequencer(&g.sequencer));
                if n >= ROUNDS {
                    done.store(true, Ordering::SeqCst);
                    return won;
                }
            }
        }));
    }
    let wins: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total: usize = wins.iter().sum();
    assert!(total >= ROUNDS, "{wins:?}");
    // One cell-wide counter, and only this node is locked: every win took the next number.
    assert_eq!(*last_gen.lock().unwrap(), first_gen + total as u64);
    assert!(cell.holders("/leader".into()).unwrap().is_empty());
}
