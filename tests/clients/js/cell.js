// Produces records through a Kafka bootstrap with KafkaJS and reads them back in a consumer
// group, for Herald's compatibility matrix (tests/integration/proxy/test_compatibility.py).
//
//   node cell.js BOOTSTRAP TOPIC RECORDS GROUP
//
// Records "0".."RECORDS-1" are produced, each with the header secret.token=x (which Herald's
// fetch chain strips); each record read back is printed as one JSON line
// {"value": ..., "headers": {name: base64 value}}. Errors go to stderr with exit code 1.
// COMPAT_TLS_CA (a CA file), COMPAT_SASL_USER and COMPAT_SASL_PASSWORD ask for TLS and
// SASL/SCRAM-SHA-512.
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

function security(env) {
  const out = {};
  if (env.COMPAT_TLS_CA) {
    out.ssl = { ca: [fs.readFileSync(env.COMPAT_TLS_CA, 'utf-8')] };
  }
  if (env.COMPAT_SASL_USER) {
    out.sasl = { mechanism: 'scram-sha-512', username: env.COMPAT_SASL_USER,
                 password: env.COMPAT_SASL_PASSWORD || '' };
    // KafkaJS re-authenticates this long before the broker's session ends (default 10 s):
    // with a session shorter than that, it would re-authenticate before every request.
    out.reauthenticationThreshold = 1000;
  }
  return out;
}

async function main([bootstrap, topic, count, group]) {
  const records = Number(count);
  if (!bootstrap || !topic || !group || !(records > 0)) {
    throw new Error('usage: node cell.js BOOTSTRAP TOPIC RECORDS GROUP');
  }
  const kafka = new Kafka({ clientId: 'compat-kafkajs', brokers: [bootstrap], logLevel: logLevel.ERROR,
                            ...security(process.env) });
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < records; i++) {
    messages.push({ value: String(i), headers: { 'secret.token': 'x' } });
  }
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${seen.length} of ${records} in 60 s`)), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        const headers = {};
        for (const [name, value] of Object.entries(message.headers || {})) {
          headers[name] = Buffer.from(value).toString('base64');
        }
        seen.push({ value: message.value.toString(), headers });
        if (seen.length >= records) {
          clearTimeout(timer);
          resolve();
        }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  for (const record of seen) {
    process.stdout.write(JSON.stringify(record) + '\n');
  }
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`kafkajs: ${err.stack || err}\n`);
  process.exit(1);
});
