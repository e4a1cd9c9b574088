package org.apache.flume.annotations;
public class InterfaceAudience { public @interface Private {} }
