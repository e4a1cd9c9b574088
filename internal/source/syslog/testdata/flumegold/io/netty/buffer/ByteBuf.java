package io.netty.buffer;
public class ByteBuf { byte[] d; int r; public ByteBuf(byte[] d){this.d=d;} public boolean isReadable(){return r<d.length;} public byte readByte(){return d[r++];} }
