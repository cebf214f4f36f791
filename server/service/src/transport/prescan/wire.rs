//! Reading protobuf's wire format without decoding: the fields of one encoded message in wire
//! order (numbers and values, nested messages as byte slices), groups skipped, varints read;
//! a malformed encoding is an error at the point it becomes malformed, as in the decoder.

/// A malformed encoding.
#[derive(Debug)]
pub struct Malformed;

/// One step of a count: on, or stopped by a malformed encoding.
pub type Step = Result<(), Malformed>;

/// One field's value.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// A varint (its value is not needed).
    Varint,
    /// A length-delimited value.
    Len(&'a [u8]),
    /// A fixed-size value or a group (skipped).
    Other,
}

/// The fields of one encoded message, in wire order.
pub struct Fields<'a> {
    buf: &'a [u8],
}

/// How deep groups of unknown fields may nest (the decoder's recursion limit).
const GROUP_DEPTH: usize = 100;

fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(Malformed)?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(Malformed)
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }

    fn skip(&mut self, n: usize) -> Step {
        if self.buf.len() < n {
            return Err(Malformed);
        }
        self.buf = &self.buf[n..];
        Ok(())
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], Malformed> {
        let len = usize::try_from(varint(&mut self.buf)?).map_err(|_| Malformed)?;
        if len > self.buf.len() {
            return Err(Malformed);
        }
        let (v, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(v)
    }

    /// Skips a group whose start (field `number`) was just read.
    fn skip_group(&mut self, number: u64) -> Step {
        let mut open = vec![number];
        while let Some(&inner) = open.last() {
            let key = varint(&mut self.buf)?;
            match key & 7 {
                0 => {
                    varint(&mut self.buf)?;
                }
                1 => self.skip(8)?,
                2 => {
                    self.len_delimited()?;
                }
                3 => {
                    if open.len() >= GROUP_DEPTH {
                        return Err(Malformed);
                    }
                    open.push(key >> 3);
                }
                4 if key >> 3 == inner => {
                    open.pop();
                }
                5 => self.skip(4)?,
                _ => return Err(Malformed),
            }
        }
        Ok(())
    }

    /// The next field: `None` at the end.
    pub fn next(&mut self) -> Option<Result<(u32, Value<'a>), Malformed>> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u32, Value<'a>), Malformed> {
        let key = varint(&mut self.buf)?;
        let number = u32::try_from(key >> 3).map_err(|_| Malformed)?;
        if number == 0 {
            return Err(Malformed);
        }
        let value = match key & 7 {
            0 => {
                varint(&mut self.buf)?;
                Value::Varint
            }
            1 => {
                self.skip(8)?;
                Value::Other
            }
            2 => Value::Len(self.len_delimited()?),
            3 => {
                self.skip_group(key >> 3)?;
                Value::Other
            }
            5 => {
                self.skip(4)?;
                Value::Other
            }
            _ => return Err(Malformed),
        };
        Ok((number, value))
    }
}

/// Entries of a repeated enum field: packed (one length-delimited run of varints, counted by
/// their last bytes) or one per field.
pub fn enum_entries(v: Value<'_>) -> usize {
    match v {
        Value::Len(b) => b.iter().filter(|&&x| x < 0x80).count(),
        Value::Varint | Value::Other => 1,
    }
}

/// The bytes of a length-delimited field (`None` when it has another wire type: the decoder
/// refuses it there).
pub fn bytes(v: Value<'_>) -> Result<&[u8], Malformed> {
    match v {
        Value::Len(b) => Ok(b),
        Value::Varint | Value::Other => Err(Malformed),
    }
}
