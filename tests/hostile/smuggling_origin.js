// The smuggling test's origin on Node's own http server (llhttp, Node's settings): it answers
// every request it parses with a 200 naming the target (X-Origin-Target) and appends one JSON
// line per request to the log file named by its second argument (tests/hostile/smuggling_apps.py
// says the same of the Python origins). An upgrade request is answered as a plain one.
"use strict";
const fs = require("fs");
const http = require("http");

const [port, log] = process.argv.slice(2);

function answer(req, body, write) {
  fs.appendFileSync(log, JSON.stringify({
    method: req.method, target: req.url, body: body.toString("latin1"),
  }) + "\n");
  const out = Buffer.from(JSON.stringify({ target: req.url, received: body.length }));
  write(out, {
    "Content-Type": "application/json",
    "Content-Length": String(out.length),
    "X-Origin-Target": req.url,
  });
}

const server = http.createServer((req, res) => {
  const parts = [];
  req.on("data", (chunk) => parts.push(chunk));
  req.on("end", () => answer(req, Buffer.concat(parts), (out, headers) => {
    res.writeHead(200, headers);
    res.end(out);
  }));
});
server.on("upgrade", (req, socket) => {
  answer(req, Buffer.alloc(0), (out, headers) => {
    const lines = Object.entries(headers).map(([n, v]) => `${n}: ${v}`).join("\r\n");
    socket.end(`HTTP/1.1 200 OK\r\n${lines}\r\nConnection: close\r\n\r\n` + out);
  });
});
server.keepAliveTimeout = 30000;
server.listen(Number(port), "127.0.0.1");
