// A node program whose main thread blocks in named functions, as a
// synchronous request handler does: each request waits for a child process.
'use strict';
const { execFileSync } = require('child_process');

function waitForChild() {
  execFileSync('sleep', ['0.05']);
}

function handleRequest() {
  for (let i = 0; i < 2; i++) waitForChild();
}

function serve() {
  process.stdout.write('ready\n');
  for (;;) handleRequest();
}

serve();
