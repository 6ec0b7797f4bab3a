// One PGlite database in memory, with pgvector, served over the Postgres wire protocol
// on 127.0.0.1: `node serve.mjs PORT CONNECTIONS` prints `listening PORT` once it
// answers, and serves until SIGTERM or SIGINT (bench/pglite.py starts it).
//
// PGlite is one Postgres backend, one session, in one process. pglite-socket lets
// CONNECTIONS clients connect at once (a client past them is refused, "Too many
// connections") and runs their protocol messages one at a time, in arrival order, except
// that while one client is in a transaction only its messages run: every other waits
// until it commits or rolls back. Outside a transaction, another client's message may fall
// between one's Parse and Execute; and the session's prepared statements and settings are
// every client's. tarry/search/postgres.py keeps to what is safe here.
import { PGlite } from "@electric-sql/pglite";
import { vector } from "@electric-sql/pglite-pgvector";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";

const [port, connections] = process.argv.slice(2).map(Number);
if (!Number.isInteger(port) || !Number.isInteger(connections)) {
  console.error("usage: node serve.mjs PORT CONNECTIONS");
  process.exit(2);
}
const db = await PGlite.create({ extensions: { vector } });
const server = new PGLiteSocketServer({ db, port, host: "127.0.0.1", maxConnections: connections });
await server.start();
console.log(`listening ${port}`);

async function stop() {
  await server.stop();
  await db.close();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
