// tokenwire stubs for Node.js, built at run time from the repository's
// .proto files with @grpc/proto-loader (no code generation step).
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.resolve(__dirname, '..', '..', 'proto');

// The .proto files tokenwire imports from Google (google/api/annotations.proto,
// google/rpc/code.proto, google/protobuf/struct.proto): from
// $TOKENWIRE_PROTO_PATH (directories separated by ':'), or else from the
// Python packages that ship them (googleapis-common-protos, grpcio-tools).
function dependencyDirs() {
  if (process.env.TOKENWIRE_PROTO_PATH) {
    return process.env.TOKENWIRE_PROTO_PATH.split(path.delimiter).filter(Boolean);
  }
  const venvPython = path.resolve(__dirname, '..', '..', '.venv', 'bin', 'python');
  const python = process.env.PYTHON || (fs.existsSync(venvPython) ? venvPython : 'python3');
  const snippet = [
    'import pathlib, google.api, grpc_tools',
    'print(pathlib.Path(list(google.api.__path__)[0]).parent.parent)',
    "print(pathlib.Path(list(grpc_tools.__path__)[0]) / '_proto')",
  ].join('\n');
  return execFileSync(python, ['-c', snippet], { encoding: 'utf8' }).trim().split('\n');
}

function loadTokenwire() {
  const definition = protoLoader.loadSync(['tokenwire/v1/service.proto'], {
    includeDirs: [PROTO_DIR, ...dependencyDirs()],
    keepCase: true, // field names exactly as in the .proto files (snake_case)
    longs: Number,
    enums: String,
    defaults: false,
    arrays: true, // empty repeated fields are [] (token_ids of a chunk without tokens)
    oneofs: true, // `msg.event` names the oneof member that is set
  });
  return grpc.loadPackageDefinition(definition).tokenwire.v1;
}

// A TokenwireService client with promise helpers for the unary RPCs.
function connect(address) {
  const tokenwire = loadTokenwire();
  const stub = new tokenwire.TokenwireService(address, grpc.credentials.createInsecure());
  const unary = (method) => (request, deadlineSeconds = 120) =>
    new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + deadlineSeconds * 1000);
      stub[method](request, { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
    });
  return {
    stub,
    chat: unary('CreateChatCompletion'),
    generate: unary('Generate'),
    tokenize: unary('Tokenize'),
    listModels: unary('ListModels'),
    // Collect a StreamChatCompletion into its chunks.
    streamChat(request) {
      return new Promise((resolve, reject) => {
        const chunks = [];
        const call = stub.StreamChatCompletion(request);
        call.on('data', (chunk) => chunks.push(chunk));
        call.on('error', reject);
        call.on('end', () => resolve(chunks));
      });
    },
    close: () => stub.close(),
  };
}

// A message in the OpenAI shape: `content` is a google.protobuf.Value.
// protobufjs builds the well-known types (Value, Struct) in camelCase
// whatever keepCase says, hence `stringValue`.
const message = (role, text) => ({ role, content: { stringValue: text } });

module.exports = { connect, message, loadTokenwire, grpc };
