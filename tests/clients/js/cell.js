// Produces records through a Kafka bootstrap with KafkaJS and reads them back in a consumer
// group, for Herald's compatibility matrix (tests/integration/proxy/test_compatibility.py).
//
//   node cell.js BOOTSTRAP TOPIC RECORDS GROUP
//
// Records "0".."RECORDS-1" are produced, each with the header secret.token=x (which Herald's
// fetch chain strips); each record read back is printed as one JSON line
// {"value": ..., "headers": {name: base64 value}}. Errors go to stderr with exit code 1.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

async function main([bootstrap, topic, count, group]) {
  const records = Number(count);
  if (!bootstrap || !topic || !group || !(records > 0)) {
    throw new Error('usage: node cell.js BOOTSTRAP TOPIC RECORDS GROUP');
  }
  const kafka = new Kafka({ clientId: 'compat-kafkajs', brokers: [bootstrap], logLevel: logLevel.ERROR });
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
