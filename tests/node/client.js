// The official Node.js client of Cloud Bigtable (@google-cloud/bigtable,
// the version tests/setup.sh pins) against a daemon, in emulator mode
// (BIGTABLE_EMULATOR_HOST): admin and data calls as the client's own system
// tests make them, each result asserted. tests/tests/node_client.rs runs it;
// NODE_PATH points at the client's node_modules. Prints one line a step.
'use strict';

const assert = require('node:assert/strict');
const {Bigtable} = require('@google-cloud/bigtable');

const bigtable = new Bigtable({projectId: 'p'});
const instance = bigtable.instance(process.env.BIGTABLE_INSTANCE || 'default');

function step(name) {
  console.log(`step: ${name}`);
}

// A row's cells as {family: {qualifier: [values newest first]}}.
function values(row) {
  const out = {};
  for (const [fam, cols] of Object.entries(row.data)) {
    out[fam] = {};
    for (const [q, cells] of Object.entries(cols)) {
      out[fam][q] = cells.map(c => c.value);
    }
  }
  return out;
}

function streamRows(table, opts) {
  return new Promise((resolve, reject) => {
    const rows = [];
    table
      .createReadStream(opts)
      .on('error', reject)
      .on('data', row => rows.push(row))
      .on('end', () => resolve(rows));
  });
}

async function admin() {
  step('create a table with families, one with a GC rule');
  const table = instance.table('nodetable');
  const [created] = await table.create({
    families: ['follows', {name: 'traits', rule: {versions: 2}}],
  });
  assert.equal(created.id, 'nodetable');
  assert.equal((await table.exists())[0], true);
  assert.equal((await instance.table('nosuchtable').exists())[0], false);

  step('getFamilies: every family, with and without a rule');
  let [families] = await table.getFamilies();
  const byId = Object.fromEntries(families.map(f => [f.id, f]));
  assert.deepEqual(Object.keys(byId).sort(), ['follows', 'traits']);
  assert.equal(byId.traits.metadata.gcRule.maxNumVersions, 2);
  assert.equal(byId.follows.metadata.gcRule, null);

  step('getMetadata');
  const [meta] = await table.getMetadata();
  assert.match(meta.name, /\/tables\/nodetable$/);
  assert.deepEqual(Object.keys(meta.columnFamilies).sort(), ['follows', 'traits']);

  step('createFamily, with a union rule and without a rule');
  const [fam] = await table.createFamily('stats', {
    rule: {versions: 3, age: {seconds: 86400, nanos: 0}, union: true},
  });
  assert.equal(fam.id, 'stats');
  await table.createFamily('cf');
  [families] = await table.getFamilies();
  assert.deepEqual(families.map(f => f.id).sort(), ['cf', 'follows', 'stats', 'traits']);
  const stats = families.find(f => f.id === 'stats');
  assert.equal(stats.metadata.gcRule.union.rules.length, 2);

  step('modifyColumnFamilies: update a rule (family.setMetadata), drop a family');
  await table.family('traits').setMetadata({rule: {versions: 5}});
  const [traits] = await table.family('traits').getMetadata();
  assert.equal(traits.gcRule.maxNumVersions, 5);
  await table.family('follows').delete();
  [families] = await table.getFamilies();
  assert.deepEqual(families.map(f => f.id).sort(), ['cf', 'stats', 'traits']);

  step('createTable through the instance, and getTables');
  const [other] = await instance.createTable('nodeother', {families: ['x']});
  assert.equal(other.id, 'nodeother');
  const [tables] = await instance.getTables();
  const ids = tables.map(t => t.id);
  assert.ok(ids.includes('nodetable') && ids.includes('nodeother'), ids.join());
  return table;
}

async function data(table) {
  step('insert rows');
  await table.insert([
    {key: 'alincoln', data: {cf: {name: 'Abraham', born: '1809'}, traits: {tall: 'yes'}}},
    {key: 'gwashington', data: {cf: {name: 'George'}}},
    {key: 'tjefferson', data: {cf: {name: 'Thomas'}, traits: {tall: 'yes'}}},
    {key: 'user#1', data: {cf: {visits: 'a'}}},
    {key: 'user#2', data: {cf: {visits: 'b'}}},
  ]);

  step('get one row, and some columns of it');
  const [row] = await table.row('alincoln').get();
  assert.deepEqual(values(row), {cf: {born: ['1809'], name: ['Abraham']}, traits: {tall: ['yes']}});
  const [cols] = await table.row('alincoln').get(['cf:name']);
  assert.deepEqual(cols, {cf: {name: [cols.cf.name[0]]}});
  assert.equal(cols.cf.name[0].value, 'Abraham');
  assert.equal((await table.row('nobody').exists())[0], false);

  step('mutate: versions with timestamps, a delete of a column');
  const t = (ms) => new Date(ms);
  await table.mutate([
    {key: 'alincoln', data: {traits: {hat: {value: 'stovepipe', timestamp: t(2000)}}}, method: 'insert'},
    {key: 'alincoln', data: {traits: {hat: {value: 'bowler', timestamp: t(1000)}}}, method: 'insert'},
  ]);
  const [hats] = await table.row('alincoln').get(['traits:hat']);
  assert.deepEqual(hats.traits.hat.map(c => c.value), ['stovepipe', 'bowler']);
  await table.row('alincoln').deleteCells(['cf:born']);
  const [after] = await table.row('alincoln').get();
  assert.equal(after.data.cf.born, undefined);

  step('getRows: all, by keys, by prefix, by range, with a limit');
  let [rows] = await table.getRows();
  assert.deepEqual(rows.map(r => r.id), ['alincoln', 'gwashington', 'tjefferson', 'user#1', 'user#2']);
  [rows] = await table.getRows({keys: ['tjefferson', 'gwashington']});
  assert.deepEqual(rows.map(r => r.id), ['gwashington', 'tjefferson']);
  [rows] = await table.getRows({prefix: 'user#'});
  assert.deepEqual(rows.map(r => r.id), ['user#1', 'user#2']);
  [rows] = await table.getRows({start: 'b', end: 'tjefferson'});
  assert.deepEqual(rows.map(r => r.id), ['gwashington', 'tjefferson']);
  [rows] = await table.getRows({limit: 2});
  assert.deepEqual(rows.map(r => r.id), ['alincoln', 'gwashington']);

  step('filters: family, column, value regex, chains, interleave, condition, limits, labels, strip');
  const ids = async (filter) => (await table.getRows({filter}))[0].map(r => r.id);
  assert.deepEqual(await ids({family: 'traits'}), ['alincoln', 'tjefferson']);
  // Regexes match the whole value or key, as in Cloud Bigtable.
  assert.deepEqual(await ids({value: /^Th/}), []);
  assert.deepEqual(await ids({value: /Th.*/}), ['tjefferson']);
  assert.deepEqual(await ids({row: /user.*/}), ['user#1', 'user#2']);
  assert.deepEqual(await ids([{family: 'cf'}, {column: 'name'}, {value: 'George'}]), ['gwashington']);
  assert.deepEqual(
    await ids({interleave: [[{column: 'visits'}], [{value: 'Abraham'}]]}),
    ['alincoln', 'user#1', 'user#2']
  );
  [rows] = await table.getRows({
    keys: ['alincoln'],
    filter: [{column: 'hat'}, {column: {cellLimit: 1}}],
  });
  assert.deepEqual(rows[0].data.traits.hat.map(c => c.value), ['stovepipe']);
  [rows] = await table.getRows({keys: ['alincoln'], filter: {row: {cellLimit: 1}}});
  const cells = Object.values(rows[0].data).flatMap(f => Object.values(f)).flat();
  assert.equal(cells.length, 1);
  [rows] = await table.getRows({keys: ['alincoln'], filter: [{column: 'name'}, {label: 'found'}]});
  assert.deepEqual(rows[0].data.cf.name[0].labels, ['found']);
  [rows] = await table.getRows({keys: ['alincoln'], filter: [{column: 'name'}, {value: {strip: true}}]});
  assert.equal(rows[0].data.cf.name[0].value, '');
  [rows] = await table.getRows({
    keys: ['alincoln', 'gwashington'],
    filter: {condition: {test: {family: 'traits'}, pass: {column: 'name'}, fail: {all: false}}},
  });
  assert.deepEqual(rows.map(r => r.id), ['alincoln']);
  [rows] = await table.getRows({
    keys: ['alincoln'],
    filter: [{column: 'hat'}, {time: {start: t(1500), end: t(3000)}}],
  });
  assert.deepEqual(rows[0].data.traits.hat.map(c => c.value), ['stovepipe']);

  step('createReadStream over ranges');
  rows = await streamRows(table, {ranges: [{start: 'a', end: 'h'}, {start: 'user#2'}]});
  assert.deepEqual(rows.map(r => r.id), ['alincoln', 'gwashington', 'user#2']);

  step('sampleRowKeys');
  const [samples] = await table.sampleRowKeys();
  assert.ok(Array.isArray(samples) && samples.length >= 1, JSON.stringify(samples));

  step('readModifyWrite: increment and append');
  const counter = table.row('counter');
  const [n] = await counter.increment('stats:hits', 5);
  assert.equal(n, 5);
  const [m] = await counter.increment('stats:hits', -2);
  assert.equal(m, 3);
  await counter.createRules([{column: 'cf:log', append: 'ab'}]);
  const [rules] = await counter.createRules([{column: 'cf:log', append: 'cd'}]);
  assert.ok(rules, 'createRules returns the row');
  const [c] = await counter.get(['cf:log']);
  assert.equal(c.cf.log[0].value, 'abcd');

  step('checkAndMutate: on match and on no match');
  const [matched] = await table.row('gwashington').filter(
    {column: 'name', value: 'George'},
    {
      onMatch: [{method: 'insert', data: {cf: {president: '1'}}}],
      onNoMatch: [{method: 'insert', data: {cf: {president: 'no'}}}],
    }
  );
  assert.equal(matched, true);
  const [nomatch] = await table.row('user#1').filter(
    {column: 'name'},
    {onNoMatch: [{method: 'delete'}]}
  );
  assert.equal(nomatch, false);
  assert.equal((await table.row('user#1').exists())[0], false);
  const [gw] = await table.row('gwashington').get(['cf:president']);
  assert.equal(gw.cf.president[0].value, '1');

  step('deleteRows by prefix, a row delete, truncate');
  await table.deleteRows('user#');
  await table.row('tjefferson').delete();
  [rows] = await table.getRows();
  assert.deepEqual(rows.map(r => r.id), ['alincoln', 'counter', 'gwashington']);
  await table.truncate();
  [rows] = await table.getRows();
  assert.equal(rows.length, 0);

  step('errors: a missing family, a missing table');
  await assert.rejects(table.insert([{key: 'r', data: {nope: {q: 'v'}}}]));
  await assert.rejects(instance.table('nosuchtable').getRows(), e => e.code === 5);
}

// Instance admin as the client's system tests set up: an instance with one
// cluster (the operation awaited), app profiles, metadata, and deletes.
async function instances() {
  step('createInstance with a cluster, and its operation');
  const inst = bigtable.instance('nodeinst');
  const [, op] = await inst.create({
    clusters: [{id: 'nodeinst-c1', location: 'us-central1-c', nodes: 1}],
    labels: {made_by: 'node'},
    displayName: 'node instance',
  });
  await op.promise();
  assert.equal((await inst.exists())[0], true);

  step('getInstances, getMetadata, setMetadata');
  const [list] = await bigtable.getInstances();
  assert.ok(list.map(i => i.id).includes('nodeinst'), list.map(i => i.id).join());
  let [meta] = await inst.getMetadata();
  assert.equal(meta.displayName, 'node instance');
  await inst.setMetadata({displayName: 'renamed'});
  [meta] = await inst.getMetadata();
  assert.equal(meta.displayName, 'renamed');

  step('getClusters');
  const [clusters] = await inst.getClusters();
  assert.equal(clusters.length, 1);

  step('app profiles: create, get, list, update, delete');
  const [profile] = await inst.createAppProfile('nodeprofile', {
    routing: 'any',
    description: 'made by node',
    ignoreWarnings: true,
  });
  assert.equal(profile.id, 'nodeprofile');
  const [pm] = await profile.getMetadata();
  assert.equal(pm.description, 'made by node');
  await profile.setMetadata({description: 'changed', ignoreWarnings: true});
  const [profiles] = await inst.getAppProfiles();
  const found = profiles.find(p => p.id === 'nodeprofile');
  assert.ok(found, profiles.map(p => p.id).join());
  assert.equal(found.metadata.description, 'changed');
  await profile.delete({ignoreWarnings: true});

  step('a table in the new instance, then the instance deleted');
  const t = inst.table('t');
  await t.create({families: ['f']});
  await t.insert([{key: 'r', data: {f: {q: 'in nodeinst'}}}]);
  const [r] = await t.row('r').get();
  assert.equal(r.data.f.q[0].value, 'in nodeinst');
  await t.delete();
  await inst.delete();
  assert.equal((await inst.exists())[0], false);
}

async function main() {
  await instances();
  const table = await admin();
  await data(table);
  step('delete the tables');
  await table.delete();
  await instance.table('nodeother').delete();
  assert.equal((await table.exists())[0], false);
  console.log('all steps passed');
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
