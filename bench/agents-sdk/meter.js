// Benchmark only: the SQL and alarm meter the side-by-side agents install on ctx.storage.
//
// installMeter wraps ctx.storage.sql.exec BEFORE an Agent constructor runs: it calls the
// original, reads the whole cursor, adds the cursor's billed rowsRead/rowsWritten to the
// counters and returns a cursor-like object over the rows read. Alarm writes
// (setAlarm/deleteAlarm) are counted too. It returns the counters, the unmetered exec and
// getAlarm, for routes that must read without being charged.
const FIELDS = ["statements", "rowsRead", "rowsWritten", "setAlarm", "deleteAlarm"];

function cursorOver(rows, cursor) {
  const columnNames = cursor.columnNames;
  return {
    columnNames,
    rowsRead: cursor.rowsRead,
    rowsWritten: cursor.rowsWritten,
    toArray: () => rows,
    one: () => {
      if (rows.length !== 1) throw new Error(`Expected exactly one result from SQL query, got ${rows.length}`);
      return rows[0];
    },
    raw: () => rows.map((row) => columnNames.map((name) => row[name]))[Symbol.iterator](),
    next: (() => {
      const it = rows[Symbol.iterator]();
      return () => it.next();
    })(),
    [Symbol.iterator]: () => rows[Symbol.iterator](),
  };
}

export function installMeter(ctx) {
  const meter = Object.fromEntries(FIELDS.map((f) => [f, 0]));
  const sql = ctx.storage.sql;
  const exec = sql.exec.bind(sql);
  sql.exec = (query, ...bindings) => {
    const cursor = exec(query, ...bindings);
    const rows = cursor.toArray();
    meter.statements += 1;
    meter.rowsRead += cursor.rowsRead;
    meter.rowsWritten += cursor.rowsWritten;
    return cursorOver(rows, cursor);
  };
  const storage = ctx.storage;
  const setAlarm = storage.setAlarm.bind(storage);
  const deleteAlarm = storage.deleteAlarm.bind(storage);
  const getAlarm = storage.getAlarm.bind(storage);
  storage.setAlarm = (...args) => {
    meter.setAlarm += 1;
    return setAlarm(...args);
  };
  storage.deleteAlarm = (...args) => {
    meter.deleteAlarm += 1;
    return deleteAlarm(...args);
  };
  return { meter, exec, getAlarm };
}

export const snapshot = (meter) => ({ ...meter });
export const delta = (after, before) => Object.fromEntries(FIELDS.map((f) => [f, after[f] - before[f]]));
