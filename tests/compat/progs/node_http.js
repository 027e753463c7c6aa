// An HTTP/1.1 server and client on Node.js's http module, for
// tests/compat/test_node_http.py (curl fetches from the server too).
//
//   node node_http.js server PORT FILE
//       GET /blob: FILE; POST /sha256: the hex SHA-256 of the body;
//       GET /hello: "hello\n"; GET /destroy: "bye\n", a body the
//       connection's end delimits, ended by socket.destroy() (libuv closes
//       the socket with a raw close system call, not libc's close).
//       Serves until SIGTERM, then closes and prints "served N requests".
//   node node_http.js client PORT FILE
//       over one keep-alive connection: GET /blob twice, POST FILE to
//       /sha256, GET /hello; prints "ok blob SHA SHA, post SHA, hello"
//       (the SHA-256s of what came back).
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');

const sha = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

function server(port, file) {
  const blob = fs.readFileSync(file);
  let served = 0;
  const srv = http.createServer((req, res) => {
    const body = [];
    req.on('data', (c) => body.push(c));
    req.on('end', () => {
      served++;
      if (req.method === 'GET' && req.url === '/blob') {
        res.writeHead(200, { 'Content-Length': blob.length });
        res.end(blob);
      } else if (req.method === 'POST' && req.url === '/sha256') {
        const digest = sha(Buffer.concat(body)) + '\n';
        res.writeHead(200, { 'Content-Length': digest.length });
        res.end(digest);
      } else if (req.method === 'GET' && req.url === '/destroy') {
        const sock = req.socket;
        sock.write('HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye\n', () => sock.destroy());
      } else if (req.method === 'GET' && req.url === '/hello') {
        res.writeHead(200, { 'Content-Length': 6 });
        res.end('hello\n');
      } else {
        res.writeHead(404, { 'Content-Length': 0 });
        res.end();
      }
    });
  });
  srv.keepAliveTimeout = 30000;
  srv.listen(port, '127.0.0.1');
  process.on('SIGTERM', () => {
    srv.close(() => {
      console.log(`served ${served} requests`);
      process.exit(0);
    });
    srv.closeAllConnections?.();
  });
}

function request(agent, port, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`${method} ${path}: ${res.statusCode}`));
        else resolve(Buffer.concat(chunks));
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function client(port, file) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let sockets = 0;
  agent.on('free', () => {});
  const origCreate = agent.createConnection.bind(agent);
  agent.createConnection = (...args) => { sockets++; return origCreate(...args); };
  const a = sha(await request(agent, port, 'GET', '/blob'));
  const b = sha(await request(agent, port, 'GET', '/blob'));
  const post = (await request(agent, port, 'POST', '/sha256', fs.readFileSync(file))).toString().trim();
  const hello = (await request(agent, port, 'GET', '/hello')).toString();
  agent.destroy();
  if (hello !== 'hello\n') throw new Error(`hello: ${JSON.stringify(hello)}`);
  if (sockets !== 1) throw new Error(`${sockets} connections, not one keep-alive`);
  console.log(`ok blob ${a} ${b}, post ${post}, hello`);
}

const [mode, port, file] = process.argv.slice(2);
if (mode === 'server' && file) server(Number(port), file);
else if (mode === 'client' && file) client(Number(port), file).catch((e) => { console.error(e); process.exit(1); });
else { console.error('usage: node_http.js server|client PORT FILE'); process.exit(2); }
